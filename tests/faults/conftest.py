"""Fault scenarios share one generated site (444 pages over 4 hosts) served by nginx."""

import pytest

from manager.local.services import StaticSite, free_port
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site


@pytest.fixture(scope="package")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults-site")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=100, seed=11)
    manifest = generate_site(root, spec)
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run") as served:
        yield manifest, served
