from hypothesis import given, settings
from hypothesis import strategies as st
from w3lib.url import canonicalize_url

from master.urls import canonical_url, url_digest

SAFE = "abcXYZ019_.~-"
hosts = st.from_regex(r"[a-z0-9.-]{1,12}", fullmatch=True)
ports = st.one_of(st.just(""), st.integers(0, 65535).map(lambda p: f":{p}"),
                  st.integers(0, 999).map(lambda p: f":0{p}"))
paths = st.one_of(st.just(""), st.lists(st.text(SAFE, max_size=6), max_size=4).map(
    lambda parts: "/" + "/".join(parts)))
pairs = st.tuples(st.text(SAFE, min_size=0, max_size=4),
                  st.one_of(st.none(), st.text(SAFE + "=", max_size=4)))
queries = st.one_of(st.just(""), st.just("?"), st.lists(pairs, max_size=4).map(
    lambda ps: "?" + "&".join(k if v is None else f"{k}={v}" for k, v in ps)))
fragments = st.one_of(st.just(""), st.just("#"), st.text(SAFE + "#?/&=%:", max_size=6).map(
    lambda text: "#" + text))


@settings(max_examples=1000, deadline=None)
@given(st.sampled_from(["http", "https"]), hosts, ports, paths, queries, fragments)
def test_fast_path_equals_w3lib(scheme, host, port, path, query, fragment):
    url = f"{scheme}://{host}{port}{path}{query}{fragment}"
    assert canonical_url(url) == canonicalize_url(url)


def test_argument_order_and_fragment_do_not_matter():
    assert canonical_url("http://a.com/x?b=1&a=2") == canonical_url("http://a.com/x?a=2&b=1")
    assert canonical_url("HTTP://A.com/x#top") == "http://a.com/x"
    assert url_digest("http://a.com/x?b=1&a=2") == url_digest("http://a.com/x?a=2&b=1")


def test_invalid_port_is_an_error():
    import pytest

    with pytest.raises(ValueError):
        canonical_url("http://a.com:70000/")


def test_unusual_urls_fall_back_to_w3lib():
    for url in ["http://a.com/中文", "http://a.com/a/../b", "http://a.com/%7Ex?q=a+b",
                "http://a.com/x y", "https://a.com/p;x=1"]:
        assert canonical_url(url) == canonicalize_url(url)
