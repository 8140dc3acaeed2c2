"""``crawlcluster start-spider``'s parts (manager/everynode.py): its ``NAME=VALUE``
options, and its clear refusals against a real ZooKeeper registry. The start itself, on
two nodes, is in tests/crawler/test_crawler_user_spider_deploy.py."""

import pytest

from manager.everynode import pairs, start_everywhere
from settings.errors import CrawlClusterError


def test_name_value_options_are_parsed_and_a_bad_one_is_named():
    assert pairs(["start=http://a.example/?x=1", "empty="], "-a") == {
        "start": "http://a.example/?x=1", "empty": ""}
    with pytest.raises(CrawlClusterError, match="-s 'LOG_LEVEL': give NAME=VALUE"):
        pairs(["LOG_LEVEL"], "-s")


def test_no_node_or_an_unknown_node_is_refused_with_what_is_registered(test_settings,
                                                                        zookeeper):
    with pytest.raises(CrawlClusterError, match="no node is registered"):
        start_everywhere(test_settings, zookeeper, "newsproject", "news", {}, {})
    with pytest.raises(CrawlClusterError, match=r"no node named nodeX in the registry "
                                                r"\(registered: none\)"):
        start_everywhere(test_settings, zookeeper, "newsproject", "news", {}, {}, ["nodeX"])
