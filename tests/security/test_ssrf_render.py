"""A rendered page's own requests cannot reach the cluster's network.

In a network namespace of its own (ssrfnet.py: a public site, a listener on every target
address, a resolver with a private and a rebinding name), the crawler's ``Browser``
renders (Chromium without its resolver rules: PageRequests is the defence tested), for
each target, a page of the public site whose script fetches the target,
POSTs to it, frames it, loads it as an image, opens a WebSocket to it and fetches a
redirect to it (tests/security/render_probe.py). Each target's listener must count no
connection, the page must hold nothing the listener answers, and the site's own page,
fetched by the same script, must arrive (the scripts ran). A second run loads the pages
in Chromium with the crawler's arguments and no routing at all: its resolver rules alone
keep every request off the network.

Each test fails with its defence removed: with a page's requests let through
(``route.continue_()``, as before) the fetches, the POST and the frame arrive; without
the WebSocket route, the WebSocket does; without the resolver rules, the unrouted page's
requests do.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.security.ssrfnet import TARGETS, SsrfNetwork, can_make_namespaces

ROOT = Path(__file__).resolve().parents[2]
SECRET = "SECRET"


@pytest.fixture(scope="module")
def network(base_settings, tmp_path_factory):
    """One namespace for the module: each render's hits are read as its line comes."""
    if not can_make_namespaces():
        message = "network namespaces need root and iproute2 (ip)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    net = SsrfNetwork(base_settings, tmp_path_factory.mktemp("ssrf-render"))
    yield net
    net.close()


def probe(network, mode):
    """``{target name: (its probe line, the listeners' hits once it was printed)}``."""
    # the default settings: no private network allowed (the tests' own allow loopback)
    env = {k: v for k, v in os.environ.items() if k != "CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS"}
    names = [target.name for target in TARGETS]
    command = network.command(["python", "-m", "tests.security.render_probe", mode, *names])
    found = {}
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            shown = json.loads(line)
            found[shown["name"]] = (shown, network.listeners.reached())
        assert process.wait(240) == 0
    return found


@pytest.fixture(scope="module")
def routed(network):
    return probe(network, "routed")


@pytest.fixture(scope="module")
def unrouted(network):
    return probe(network, "unrouted")


@pytest.mark.parametrize("target", TARGETS, ids=[target.name for target in TARGETS])
def test_a_rendered_pages_requests_to_the_target_are_refused(routed, target):
    shown, hits = routed[target.name]
    print(f"\n{target.name} ({target.url}): {shown['text']!r}; render counters "
          f"{shown['stats']}; listeners reached {hits}")
    assert "public" in shown["text"]                 # the page's scripts ran
    assert SECRET not in shown["text"]
    assert hits.get(target.listener, 0) == 0


def test_no_listener_was_reached_by_any_rendered_page(routed):
    _, hits = routed[TARGETS[-1].name]
    assert hits == {}


def test_the_refusals_are_counted(routed):
    shown, _ = routed["dotted"]
    stats = shown["stats"]
    # its fetch, POST, frame, image and WebSocket, and the redirect's second hop
    assert stats["requests_refused/guard"] >= 5
    assert stats["requests_refused/websocket"] >= 1


@pytest.mark.parametrize("target", TARGETS, ids=[target.name for target in TARGETS])
def test_chromium_with_no_routing_still_reaches_no_target(unrouted, target):
    shown, hits = unrouted[target.name]
    print(f"\n{target.name}, unrouted: {shown['text']!r}; listeners reached {hits}")
    assert SECRET not in shown["text"]
    assert hits.get(target.listener, 0) == 0
