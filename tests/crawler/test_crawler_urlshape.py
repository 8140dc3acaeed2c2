"""Which URLs are well formed enough to fetch (crawler/urlshape.py)."""

import pytest

from crawler.urlshape import url_problem


@pytest.mark.parametrize("url", [
    "http://example.com:99999/x", "http://[::1/x", "http://[zz]/x", "http://exa\x00mple.com/",
    "http://example.com/a\nb", "http://ex ample.com/", "http://:80/", "http://example.com:-1/",
    "http://example.com:0/", "http://a..b/", "http://%zz/", f"http://{'a' * 64}.com/",
    "http://" + ".".join(["a" * 60] * 5) + "/", "ftp://example.com/", "javascript:alert(1)",
])
def test_malformed_urls_are_refused_with_a_reason(url):
    assert url_problem(url)


@pytest.mark.parametrize("url", [
    "http://example.com/a?b=1#c", "https://xn--bcher-kva.example/", "http://bücher.example/",
    "http://127.0.0.1:8080/", "http://[::1]:80/", "http://example.com./", "http://a_b.example/",
    "HTTP://Example.COM/Path", "http://example.com/%7Euser/a%20b",
])
def test_well_formed_urls_pass(url):
    assert url_problem(url) is None


def test_a_url_over_the_length_limit_is_refused():
    assert url_problem("http://example.com/" + "a" * 100, max_length=100)
    assert url_problem("http://example.com/" + "a" * 10, max_length=100) is None
