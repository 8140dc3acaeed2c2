"""Requests for the message-processing tests: valid ones of every type, and
malformed ones of many distinct kinds, each with the reason it must be refused for."""

import json

RULE = {"rules": [{"allow": ["/news/"], "fields": {"title": "//h1/text()"}}]}
PRECISE_RULE = {"first_page_xpath": {"list_from": "//li", "second_page_url": "a/@href"}}
MAX_BYTES = 4096          # CRAWLCLUSTER_MAX_MESSAGE_BYTES in the intake tests


def crawl(n, **changes):
    message = {"type": "crawl", "userid": "u1", "crawlid": f"c{n}",
               "url": f"http://site{n % 7}.com/start/{n}", "spider_type": "universal",
               "rule": RULE, **changes}
    return {k: v for k, v in message.items() if v is not None}


def valid(n):
    """The n-th valid request, cycling through every request type and format."""
    kinds = [
        lambda: crawl(n, uuid=f"v{n}"),
        lambda: {"url": f"http://sc{n % 5}.org/{n}", "appid": "testapp", "crawlid": f"sc{n}",
                 "uuid": f"v{n}"},
        lambda: {"type": "info", "userid": "u1", "crawlid": f"c{n}", "uuid": f"v{n}"},
        lambda: {"type": "stop", "userid": "u1", "crawlid": f"nosuch{n}", "uuid": f"v{n}"},
        lambda: {"type": "stats", "userid": "u1", "uuid": f"v{n}", "stats": "queue"},
        lambda: {"type": "site_config", "userid": "u1", "action": "rate", "uuid": f"v{n}",
                 "domain": f"d{n}.com", "rate": 5},
        lambda: {"action": "info", "appid": "testapp", "uuid": f"v{n}", "spiderid": "link",
                 "crawlid": f"sc{n}"},
        lambda: {"action": "stop", "appid": "testapp", "uuid": f"v{n}", "spiderid": "link",
                 "crawlid": f"nosuch{n}"},
        lambda: {"stats": "kafka-monitor", "appid": "testapp", "uuid": f"v{n}"},
        lambda: {"uuid": f"v{n}", "appid": "testapp", "action": "blacklist-update",
                 "domain": f"bad{n}.org"},
    ]
    return kinds[n % len(kinds)]()


def _raw(message):
    return json.dumps(message).encode("utf-8")


_INFO = {"type": "info", "userid": "u", "crawlid": "c", "uuid": "q"}
_SC_CRAWL = {"url": "http://a.com/", "appid": "app", "crawlid": "c"}
_ZK = {"uuid": "u", "appid": "a", "action": "domain-update", "domain": "d.org", "hits": 1,
       "window": 1}

# (value as produced, text the refusal's reason must contain)
MALFORMED = [
    (None, "empty message"),
    (b"", "not JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b'{"type": "info", "userid": "\xc3\x28"}', "not UTF-8"),
    (b"{not json", "not JSON"),
    (b'{"a": 1} trailing', "not JSON"),
    (b"[1, 2]", "not a JSON object but a list"),
    (b'"text"', "not a JSON object but a str"),
    (b"null", "not a JSON object but a NoneType"),
    (b"42", "not a JSON object but a int"),
    (b"true", "not a JSON object but a bool"),
    (b'{"type": "crawl", "pad": "' + b"x" * MAX_BYTES + b'"}', "byte limit"),
    (_raw({"type": "bogus"}), "unknown type 'bogus'"),
    (_raw({"type": 5}), "unknown type 5"),
    (_raw({"hello": "world"}), "no 'type' field"),
    (_raw({"appid": "a"}), "not a scrapy-cluster request"),
    (_raw(crawl(1, url=None)), "'url' is a required property"),
    (_raw(crawl(1, userid=None)), "'userid' is a required property"),
    (_raw(crawl(1, userid="")), "should be non-empty"),
    (_raw(crawl(1, url="ftp://a.com/x")), "scheme must be http or https"),
    (_raw(crawl(1, url="javascript:alert(1)")), "scheme must be http or https"),
    (_raw(crawl(1, url="www.a.com/page")), "scheme must be http or https"),
    (_raw(crawl(1, url="http:///nohost")), "no valid host"),
    (_raw(crawl(1, url="http://exa mple.com/")), "no valid host"),
    (_raw(crawl(1, url="http://-bad-.com/")), "no valid host"),
    (_raw(crawl(1, url="http://a..com/")), "no valid host"),
    (_raw(crawl(1, url="http://a.com:99999/")), "bad URL"),
    (_raw(crawl(1, url=123)), "is not of type 'string'"),
    (_raw(crawl(1, crawlid="bad id!")), "does not match"),
    (_raw(crawl(1, crawlid="x" * 129)), "does not match"),
    (_raw(crawl(1, spider_type="no such spider")), "does not match"),
    (_raw(crawl(1, maxdepth=-1)), "less than the minimum"),
    (_raw(crawl(1, maxdepth=1001)), "greater than the maximum"),
    (_raw(crawl(1, priority=0)), "less than the minimum"),
    (_raw(crawl(1, priority="high")), "is not of type 'integer'"),
    (_raw(crawl(1, extra=1)), "Additional properties are not allowed"),
    (_raw(crawl(1, useragent="u" * 1025)), "is too long"),
    (_raw(crawl(1, cookie=7)), "is not of type 'string', 'object'"),
    (_raw(crawl(1, expires=-5)), "less than the minimum"),
    (_raw(crawl(1, domain_max_pages=0)), "less than the minimum"),
    (_raw(crawl(1, hubs="http://a.com/")), "is not of type 'array'"),
    (_raw(crawl(1, hub_span=0)), "less than or equal to the minimum"),
    (_raw(crawl(1, attrs=[1])), "is not of type 'object'"),
    (_raw(crawl(1, rule="x")), "is not of type 'object'"),
    (_raw(crawl(1, rule={})), "'rules' is a required property"),
    (_raw(crawl(1, rule={"rules": []})), "should be non-empty"),
    (_raw(crawl(1, rule={"rules": [{"allow": ["(bad"]}]})), "invalid regex"),
    (_raw(crawl(1, rule={"rules": [{"restrict_css": ["a["]}]})), "invalid css"),
    (_raw(crawl(1, spider_type="precise", rule={"first_page_xpath": {"list_from": "//a["}})),
     "invalid xpath"),
    (_raw(crawl(1, spider_type="precise", rule=dict(PRECISE_RULE, next_page_xpath="//a[@"))),
     "invalid xpath"),
    (_raw(crawl(1, spider_type="precise", rule=RULE)), "'first_page_xpath' is a required"),
    (_raw({k: v for k, v in _INFO.items() if k != "uuid"}), "'uuid' is a required property"),
    (_raw({k: v for k, v in _INFO.items() if k != "crawlid"}), "'crawlid' is a required"),
    (_raw(dict(_INFO, verbose=True)), "Additional properties are not allowed"),
    (_raw({"type": "stop", "userid": "u", "crawlid": "c"}), "'uuid' is a required property"),
    (_raw({"type": "stop", "userid": "u", "crawlid": "c d", "uuid": "q"}), "does not match"),
    (_raw({"type": "stats", "userid": "u", "uuid": "q"}), "'stats' is a required property"),
    (_raw({"type": "stats", "uuid": "q", "stats": "all"}), "'userid' is a required property"),
    (_raw({"type": "stats", "userid": "u", "uuid": "q", "stats": "everything"}),
     "is not one of"),
    (_raw({"type": "site_config", "userid": "u", "action": "rate", "domain": "a.com"}),
     "'rate' is a required property"),
    (_raw({"type": "site_config", "userid": "u", "action": "ban", "domain": "a.com"}),
     "is not one of"),
    (_raw({"type": "site_config", "userid": "u", "action": "rate", "domain": "a.com",
           "rate": -1}), "less than the minimum"),
    (_raw({"type": "site_config", "userid": "u", "action": "rate", "domain": "a.com",
           "rate": 1, "window": 0}), "less than or equal to the minimum"),
    (_raw({"type": "site_config", "userid": "u", "action": "blacklist", "domain": "a b"}),
     "does not match"),
    (_raw({"type": "site_config", "userid": "u", "action": "blacklist"}),
     "'domain' is a required property"),
    (_raw(dict(_SC_CRAWL, priority=0)), "less than the minimum"),
    (_raw(dict(_SC_CRAWL, url="ftp://a.com/")), "scheme must be http or https"),
    (_raw(dict(_SC_CRAWL, spiderid="bogus spider")), "does not match"),
    (_raw(dict(_SC_CRAWL, allow_regex=["("])), "invalid regex"),
    (_raw(dict(_SC_CRAWL, maxdepth="2")), "is not of type 'integer'"),
    (_raw(dict(_SC_CRAWL, appid=5)), "is not of type 'string'"),
    (_raw({"action": "pause", "appid": "a", "uuid": "u", "spiderid": "link"}), "is not one of"),
    (_raw({"action": "info", "appid": "a", "uuid": "u"}), "'spiderid' is a required property"),
    (_raw({"action": "info", "appid": "a", "uuid": "", "spiderid": "link"}),
     "should be non-empty"),
    (_raw({"stats": "kafka-monitor", "appid": "a"}), "'uuid' is a required property"),
    (_raw({"stats": "everything", "appid": "a", "uuid": "u"}), "is not one of"),
    (_raw({k: v for k, v in _ZK.items() if k != "window"}), "'window' is a required property"),
    (_raw(dict(_ZK, scale=2)), "greater than the maximum"),
    (_raw(dict(_ZK, action="blacklist-update", domain="bad domain!")), "does not match"),
]
