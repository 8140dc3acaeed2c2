"""A user's project deployed the scrapyd way (tests/crawler/userproject): ``scrapyd-deploy``
to two nodes' managers, one ``crawlcluster start-spider`` starting it on both as
long-running cluster jobs, scrapy-redis's ``RedisPipeline`` filling ``<spider>:items``;
then a crawl request through Kafka naming the same spider. nginx's log shows each page
fetched once per crawl; the items are those the spider gives under plain Scrapy."""

import json
import shutil
import subprocess
import sys
import threading
import time

import pytest

from manager.local.crawl import FAST, cluster_env
from master.crawls import CrawlStore
from master.keys import Keys
from master.registry import JobRegistry
from tests.crawler.test_crawler_user_spider import (
    PROJECT,
    ROOT,
    assert_each_page_once,
    news_site,
    plain_scrapy_items,
    start_master,
)
from tests.manager.test_manager_node import SLOW_LIST, Manager

__all__ = ["news_site", "plain_scrapy_items"]      # the fixtures, shared


def crawlcluster(env, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "manager.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def deploy(tmp_path, managers):
    """``scrapyd-deploy -a``: the project's egg to every target of its scrapy.cfg."""
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    with open(project / "scrapy.cfg", "a") as config:
        config.writelines(f"\n[deploy:{manager.settings['CRAWLCLUSTER_NODE_NAME']}]\n"
                          f"url = http://127.0.0.1:{manager.port}/\nproject = newsproject\n"
                          for manager in managers)
    done = subprocess.run([shutil.which("scrapyd-deploy") or "scrapyd-deploy", "-a",
                           "-p", "newsproject"], cwd=project, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def deploy_version(tmp_path, manager, version, spiders=()):
    """``scrapyd-deploy --version``: the project, with a spider module for each name in
    ``spiders`` added, to one manager."""
    project = tmp_path / f"project-{version}"
    shutil.copytree(PROJECT, project)
    for name in spiders:
        (project / "newsproject" / "spiders" / f"{name}.py").write_text(
            f"import scrapy\n\n\nclass Added(scrapy.Spider):\n    name = {name!r}\n")
    node = manager.settings["CRAWLCLUSTER_NODE_NAME"]
    with open(project / "scrapy.cfg", "a") as config:
        config.write(f"\n[deploy:{node}]\nurl = http://127.0.0.1:{manager.port}/\n"
                     "project = newsproject\n")
    done = subprocess.run([shutil.which("scrapyd-deploy") or "scrapyd-deploy", node, "-p",
                           "newsproject", "--version", version], cwd=project,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def wait_items(client, settings, key, count, crawlid, timeout=120):
    """The items in ``key`` once there are ``count`` and the crawl has drained: nothing
    pending, none in flight, so every fetch it made is in nginx's log (the spiders keep
    running, waiting for work)."""
    deadline = time.monotonic() + timeout
    store = CrawlStore(client, Keys.from_settings(settings))
    while client.llen(key) < count or store.progress(crawlid)["total_pending"]:
        assert time.monotonic() < deadline, (f"{client.llen(key)} of {count} items in {key}, "
                                             f"{store.progress(crawlid)['total_pending']} "
                                             "pending")
        time.sleep(0.2)
    return sorted((json.loads(raw) for raw in client.lrange(key, 0, -1)),
                  key=lambda item: item["url"])


@pytest.fixture
def two_nodes(test_settings, zookeeper, redis, tmp_path):
    nodes = []
    for n in (1, 2):
        (tmp_path / f"node{n}").mkdir()
        nodes.append(Manager(test_settings, tmp_path / f"node{n}", node=f"node{n}",
                             **{**FAST, "CRAWLCLUSTER_IDLE_TIMEOUT": 0}).start())
    yield nodes
    for node in nodes:
        node.stop()


def test_a_user_spider_deployed_with_scrapyd_deploy_runs_on_two_nodes_and_through_kafka(
        test_settings, news_site, plain_scrapy_items, two_nodes, redis, kafka_topics,
        tmp_path):
    manifest, site = news_site
    start = manifest["start_url"]
    expected = plain_scrapy_items("news")
    env = cluster_env(test_settings)
    master = start_master(env, tmp_path)
    with open(tmp_path / "preprocess.log", "w") as log:
        preprocess = subprocess.Popen([sys.executable, "-m", "manager.cli", "preprocess"],
                                      cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=log)
    items_key = f"{test_settings['CRAWLCLUSTER_KEY_PREFIX']}:%(spider)s:items"
    try:
        output = deploy(tmp_path, two_nodes)
        assert output.count('"spiders": 4') == 2, output
        for node in two_nodes:
            assert node.call("listspiders.json", project="newsproject")["spiders"] == [
                "news", "news_redis", "news_rules", "news_rules_redis"]

        since = len(site.access_log())
        started = crawlcluster(
            env, "start-spider", "newsproject", "news", "-a", f"start={start}",
            "-s", 'ITEM_PIPELINES={"scrapy_redis.pipelines.RedisPipeline": 300}',
            "-s", f"REDIS_ITEMS_KEY={items_key}", "-s", "LOG_LEVEL=INFO",
            "-s", f"REDIS_URL={test_settings['CRAWLCLUSTER_REDIS_URL']}")
        assert started.returncode == 0, started.stdout + started.stderr
        assert [line.split(":")[0] for line in started.stdout.splitlines()] == ["node1", "node2"]
        key = items_key % {"spider": "news"}
        assert wait_items(redis, test_settings, key, len(expected), "news") == expected
        assert_each_page_once(site, since, manifest, "a deployed user spider on two nodes")
        jobs = JobRegistry.from_settings(redis, test_settings).live_jobs()
        assert sorted(info["node"] for info in jobs.values() if info["spider_type"] == "news") == [
            "node1", "node2"], jobs
        for node in two_nodes:
            running = node.call("listjobs.json", project="newsproject")["running"]
            assert [job["spider"] for job in running] == ["news"]

        # the same spider, fed a crawl through Kafka: a crawl of its own, each page once again
        redis.delete(key)
        since = len(site.access_log())
        request = tmp_path / "crawl.json"
        request.write_text(json.dumps({"url": start, "appid": "test", "crawlid": "via-kafka",
                                       "spiderid": "news"}) + "\n"
                           + json.dumps({"url": start, "appid": "test", "crawlid": "nobody",
                                         "spiderid": "no_such_spider"}))
        submitted = crawlcluster(env, "submit", str(request), "--json")
        replies = sorted((json.loads(line) for line in submitted.stdout.splitlines()),
                         key=lambda reply: reply["crawlid"], reverse=True)
        assert replies[0]["status"] == "accepted", submitted.stdout + submitted.stderr
        assert replies[1]["status"] == "error" and "unknown spider 'no_such_spider'" in (
            replies[1]["error"]), replies[1]
        assert wait_items(redis, test_settings, key, len(expected), "via-kafka") == expected
        assert_each_page_once(site, since, manifest, "a crawl through Kafka naming the spider")
    finally:
        for process in (master, preprocess):
            process.terminate()
            process.wait(10)


@pytest.fixture
def slow_listing_manager(test_settings, tmp_path):
    """A node's manager whose ``scrapy list`` takes 4 s."""
    (tmp_path / "slowlist").mkdir()
    (tmp_path / "slowlist" / "sitecustomize.py").write_text(SLOW_LIST)
    (tmp_path / "node1").mkdir()
    manager = Manager(test_settings, tmp_path / "node1", node="node1",
                      env={"PYTHONPATH": str(tmp_path / "slowlist")}).start()
    yield manager
    manager.stop()


def test_a_deploy_lists_its_spiders_off_the_reactor(slow_listing_manager, tmp_path):
    """``addversion.json`` stores the egg, then lists the new version's spiders (a child
    process, 4 s here): in a thread, so the manager answers meanwhile, and the reply
    counts the spiders as scrapyd's does."""
    manager = slow_listing_manager
    said = []
    deploying = threading.Thread(target=lambda: said.append(deploy(tmp_path, [manager])))
    deploying.start()
    waits = []
    while deploying.is_alive():
        asked = time.monotonic()
        assert manager.call("daemonstatus.json")["status"] == "ok"
        waits.append(time.monotonic() - asked)
        time.sleep(0.2)
    deploying.join()
    spiders = manager.call("listspiders.json", project="newsproject")["spiders"]
    assert said and f'"spiders": {len(spiders)}' in said[0], said
    assert len(waits) >= 20 and max(waits) < 2.0, waits      # 4 s of listing in them


def test_a_deploy_is_the_default_list_as_soon_as_its_egg_is_stored(slow_listing_manager,
                                                                   tmp_path):
    """While a deploy's spiders are listed (4 s), the project's default is the new
    version already: a list asked without ``_version`` is the new one's, not the old
    default's cached list (scrapyd drops it once the new list is made)."""
    manager = slow_listing_manager
    deploy_version(tmp_path, manager, "1")
    before = manager.call("listspiders.json", project="newsproject")["spiders"]
    assert "added" not in before                 # the default's list, cached
    said = []
    deploying = threading.Thread(target=lambda: said.append(
        deploy_version(tmp_path, manager, "2", ["added"])))
    deploying.start()
    deadline = time.monotonic() + 60
    while "2" not in manager.call("listversions.json", project="newsproject")["versions"]:
        assert deploying.is_alive() and time.monotonic() < deadline
        time.sleep(0.1)
    assert deploying.is_alive()                  # its spiders still being listed
    during = manager.call("listspiders.json", project="newsproject")["spiders"]
    deploying.join()
    assert said and '"spiders": ' in said[0], said           # the deploy was answered
    assert sorted(during) == sorted([*before, "added"]), during
