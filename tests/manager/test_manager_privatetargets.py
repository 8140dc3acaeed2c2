"""The listeners bench/hostile.py counts private requests with
(manager/local/privatetargets.py): every spelling of the loopback target reaches its
listener, and every connection and request is counted, whatever its method."""

import socket
import time
import urllib.error
import urllib.request

from manager.local.privatetargets import LOOPBACK_SPELLINGS, listeners, private_targets


def test_every_spelling_method_and_bare_connect_is_counted():
    found = listeners([])                       # the loopback listener only
    try:
        loopback = found["loopback"]
        targets = private_targets(found)
        assert len({t for t in targets if t.endswith(f":{loopback.port}")}) == len(
            LOOPBACK_SPELLINGS)
        for target in targets[:len(LOOPBACK_SPELLINGS)]:
            with urllib.request.urlopen(f"{target}/x", timeout=5) as answer:
                assert answer.read() == b"secret"
        for method in ("HEAD", "OPTIONS", "BREW"):
            request = urllib.request.Request(f"{targets[0]}/m", method=method)
            try:
                urllib.request.urlopen(request, timeout=5).close()
            except urllib.error.HTTPError as refused:      # BREW: 501, counted all the same
                assert refused.code == 501
        socket.create_connection(("127.0.0.66", loopback.port), timeout=5).close()
        deadline = time.monotonic() + 5
        while len(loopback.connections) < len(LOOPBACK_SPELLINGS) + 4 \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(loopback.hits) == len(LOOPBACK_SPELLINGS) + 3, loopback.hits
        assert {hit.split()[0] for hit in loopback.hits} == {"GET", "HEAD", "OPTIONS", "BREW"}
        assert len(loopback.connections) == len(LOOPBACK_SPELLINGS) + 4   # the bare one too
    finally:
        for listener in found.values():
            listener.close()
