"""Fault scenarios share one generated site served by nginx (444 pages over 4 hosts, each
detail page linking 30 others: a page crawled twice yields many links, so a recovery that
lets them past the Bloom filter shows in nginx's log at once)."""

import pytest

from manager.local.ports import free_port
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site
from manager.local.staticsite import StaticSite


@pytest.fixture(scope="package")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults-site")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=100, related_links=30,
                    seed=11)
    manifest = generate_site(root, spec)
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run") as served:
        yield manifest, served
