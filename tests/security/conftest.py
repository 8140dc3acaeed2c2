"""The SSRF tests' fixtures: the URL guard at its default (nothing private allowed) and
the namespace of tests/security/ssrfnet.py."""

import pytest

from tests.conftest import IN_CI
from tests.security.ssrfnet import SsrfNetwork, can_make_namespaces


@pytest.fixture
def guarded_settings(test_settings):
    """The test's settings with the guard's default: no private network allowed."""
    return test_settings.copy_with(CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS=[])


@pytest.fixture
def ssrf_network(guarded_settings, tmp_path):
    if not can_make_namespaces():
        message = "network namespaces need root and iproute2 (ip)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    network = SsrfNetwork(guarded_settings, tmp_path)
    yield network
    network.close()
