"""The SSRF guard (pure logic): private, loopback and link-local targets refused."""

import pytest
from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.test import get_crawler

from crawler.middlewares import PrivateAddressGuardMiddleware, private_addresses


def guard(enabled=True):
    crawler = get_crawler(settings_dict={"CRAWLCLUSTER_REFUSE_PRIVATE_ADDRESSES": enabled})
    return PrivateAddressGuardMiddleware.from_crawler(crawler)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/", "http://10.1.2.3/admin", "http://192.168.0.1:8080/",
    "http://172.16.5.5/", "http://169.254.169.254/latest/meta-data/", "http://[::1]/",
    "http://0.0.0.0/", "http://localhost/", "http://[fe80::1]/"])
def test_private_targets_are_refused_with_the_reason(url):
    with pytest.raises(IgnoreRequest, match="is a private address"):
        guard().process_request(Request(url))


@pytest.mark.parametrize("url", ["http://93.184.216.34/", "https://[2606:4700::1111]/"])
def test_public_addresses_pass(url):
    assert guard().process_request(Request(url)) is None


def test_the_guard_is_off_unless_configured():
    with pytest.raises(NotConfigured):
        guard(enabled=False)


def test_unresolvable_hosts_are_left_to_the_download():
    assert private_addresses("no-such-host.invalid") == ()
