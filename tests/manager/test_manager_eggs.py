"""A node keeps a deployed project's newest ``KEEP_VERSIONS`` eggs (manager/eggs.py)."""

import io

from scrapyd.config import Config

from manager.eggs import KEEP_VERSIONS, BoundedEggStorage


def storage(tmp_path):
    config = Config(values={})
    config.cp.set(Config.SECTION, "eggs_dir", str(tmp_path / "eggs"))
    return BoundedEggStorage(config)


def test_a_project_keeps_its_newest_versions_and_always_the_one_just_deployed(tmp_path):
    eggs = storage(tmp_path)
    for version in range(100, 100 + KEEP_VERSIONS + 3):
        eggs.put(io.BytesIO(b"egg"), "newsproject", str(version))
    assert eggs.list("newsproject") == [str(v) for v in range(103, 100 + KEEP_VERSIONS + 3)]
    eggs.put(io.BytesIO(b"egg"), "newsproject", "1")            # sorts first: still kept
    assert "1" in eggs.list("newsproject") and len(eggs.list("newsproject")) == KEEP_VERSIONS
    eggs.put(io.BytesIO(b"egg"), "other", "7")                   # per project
    assert eggs.list("other") == ["7"]
