"""How ``crawlcluster info`` prints a reply (message_processing/client.py)."""

from message_processing.client import describe

INFO = {"action": "info", "crawlid": "c1", "total_pending": 0, "total_domains": 0,
        "domains": {}, "done": 40, "failed": 0}


def test_info_prints_what_was_rendered():
    reply = dict(INFO, render={"rendered": 12, "needed": 3, "patterns_learnt": 4,
                               "patterns_rendered": 1, "looks_scripted": 0})
    assert describe(reply).splitlines()[1] == (
        "rendered 12 pages in a browser; 3 compared pages needed it; URL patterns learnt 4, "
        "1 of them rendered")


def test_info_suggests_rendering_when_pages_looked_scripted():
    reply = dict(INFO, render={"rendered": 0, "needed": 0, "patterns_learnt": 0,
                               "patterns_rendered": 0, "looks_scripted": 7})
    assert describe(reply).splitlines()[1:] == [
        "7 pages looked built by scripts, and the rule renders none: try its render auto"]


def test_info_of_a_crawl_without_rendering_is_one_line():
    assert len(describe(dict(INFO, render={"rendered": 0})).splitlines()) == 1
