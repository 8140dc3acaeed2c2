"""The SSRF guard: private, loopback and link-local targets refused; a host name
resolved off the reactor thread, what it resolved to kept for a while."""

import asyncio

import pytest
from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.test import get_crawler

from crawler import middlewares
from crawler.middlewares import PrivateAddressGuardMiddleware


def guard(enabled=True):
    crawler = get_crawler(settings_dict={"CRAWLCLUSTER_REFUSE_PRIVATE_ADDRESSES": enabled})
    return PrivateAddressGuardMiddleware.from_crawler(crawler)


def process(guard_, url):
    return asyncio.run(guard_.process_request(Request(url)))


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/", "http://10.1.2.3/admin", "http://192.168.0.1:8080/",
    "http://172.16.5.5/", "http://169.254.169.254/latest/meta-data/", "http://[::1]/",
    "http://0.0.0.0/", "http://localhost/", "http://[fe80::1]/"])
def test_private_targets_are_refused_with_the_reason(url):
    with pytest.raises(IgnoreRequest, match="is a private address"):
        process(guard(), url)


@pytest.mark.parametrize("url", ["http://93.184.216.34/", "https://[2606:4700::1111]/"])
def test_public_addresses_pass(url):
    assert process(guard(), url) is None


def test_the_guard_is_off_unless_configured():
    with pytest.raises(NotConfigured):
        guard(enabled=False)


def test_unresolvable_hosts_are_left_to_the_download():
    assert asyncio.run(guard().private_addresses("no-such-host.invalid")) == ()


def test_a_host_is_resolved_off_the_loop_kept_a_while_and_the_hosts_kept_are_bounded(
        monkeypatch):
    guard_, asked = guard(), []

    async def main():
        loop = asyncio.get_running_loop()

        async def getaddrinfo(host, port):
            asked.append(host)
            return [(None, None, None, None, ("10.0.0.7", 0))]

        monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
        for _ in range(3):
            assert await guard_.private_addresses("intranet.example") == ("10.0.0.7",)
        monkeypatch.setattr(middlewares, "RESOLVED_FOR", 0.0)
        await guard_.private_addresses("other.example")          # kept no time at all
        await guard_.private_addresses("other.example")
        monkeypatch.setattr(middlewares, "RESOLVED_HOSTS", 2)
        for n in range(5):
            await guard_.private_addresses(f"h{n}.example")

    asyncio.run(main())
    assert asked.count("intranet.example") == 1 and asked.count("other.example") == 2
    assert len(guard_.resolved) == 2
