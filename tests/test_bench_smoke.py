"""Every benchmark under bench/ runs with its smallest arguments and ends with its JSON
line, so that a change that breaks one fails CI (``.ci/run`` runs these with
``-m bench``; the README's test command leaves them out: the figures are not checked,
and the runs take minutes)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "benchmarks"
MINI_PAGES = 3          # pages of each main-text benchmark the smoke run reads

# bench/<name>.py -> its smallest arguments ({work}: a directory of the test's own)
SMALLEST = {
    "bloom": ["--quick"],
    "changes": ["--articles", "60"],
    "cluster": ["--pages-per-host", "5", "--rounds", "1", "--procs", "1"],
    "crawl": ["--pages-per-host", "8", "--rounds", "1"],
    "dispatch": ["--quick"],
    "export": ["--items", "500"],
    "fields": ["--pages", "{work}/article-extraction", "--crawl-rounds", "1", "--copies", "1"],
    "hostile": ["--pages-per-host", "8", "--rounds", "1", "--limit", "0"],
    "idle": ["--seconds", "1"],
    "links": ["--pages", "{work}/article-extraction", "--rounds", "1"],
    "longrun": ["--days", "3", "--capacity", "2000", "--single-only"],
    "maintext": ["--pages", "{work}/article-extraction", "--genres", "{work}/maintext-genres"],
    "preprocess": ["--messages", "300", "--rounds", "1"],
    "profile": ["--pages-per-host", "8", "--firehose"],
    "pushback": ["--seconds", "5", "--rounds", "1"],
    "render": ["--shapes", "numeric", "--scale", "0.03"],
    "render_plan": ["--variables", "500", "--patterns", "50", "--reads", "5"],
    "scale": ["--pages", "300", "--domains", "20"],
    "soak": ["--pages", "60", "--hosts", "3", "--nodes", "1", "--every", "30"],
    "versions": ["--items", "500"],
}
# bench/ modules that are not benchmarks: the peers' spiders and shared code, and
# bench/fields.py's crawl (run by its smoke run)
NOT_BENCHMARKS = {"__init__", "common", "crawl_peers", "crawl_user", "crawl_vanilla",
                  "render_crawlee", "meta_crawl"}

pytestmark = pytest.mark.bench


def test_every_benchmark_has_its_smallest_arguments():
    found = {path.stem for path in (ROOT / "bench").glob("*.py")} - NOT_BENCHMARKS
    assert found == set(SMALLEST)


VENDORED = ROOT / "tests" / "crawler" / "pages" / "real"   # five of article-extraction's


def mini_benchmarks(work, name):
    """The first pages of the shared main-text benchmarks, in their own layout. Without
    them beside the checkout, bench/links.py reads the five real pages the tests keep;
    bench/maintext.py, which needs their ground truth and scorer, is skipped."""
    if not SHARED.is_dir():
        if name in ("maintext", "fields"):
            pytest.skip(f"the main-text benchmarks are not beside the checkout ({SHARED})")
        (work / "article-extraction").mkdir()
        shutil.copytree(VENDORED, work / "article-extraction" / "html",
                        ignore=shutil.ignore_patterns("*.md", "LICENSE"))
        return
    for kind, truth_file in (("article-extraction", "ground-truth.json"),
                             ("maintext-genres", "truth.json")):
        source, target = SHARED / kind, work / kind
        (target / "html").mkdir(parents=True)
        truth = json.loads((source / truth_file).read_text(encoding="utf-8"))
        kept = dict(sorted(truth.items())[:MINI_PAGES])
        (target / truth_file).write_text(json.dumps(kept), encoding="utf-8")
        for page in kept:
            shutil.copy(source / "html" / f"{page}.html.gz", target / "html")
        if (source / "score.py").exists():
            shutil.copy(source / "score.py", target)


@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_the_benchmark_runs_and_ends_with_its_json_line(name, tmp_path, local_servers):
    if name in ("links", "maintext", "fields"):
        mini_benchmarks(tmp_path, name)
    args = [arg.format(work=tmp_path) for arg in SMALLEST[name]]
    run = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=900,
                         stdin=subprocess.DEVNULL, check=False)
    tail = f"stdout:\n{run.stdout[-3000:]}\nstderr:\n{run.stderr[-3000:]}"
    assert run.returncode == 0, tail
    last = run.stdout.strip().splitlines()[-1]
    assert isinstance(json.loads(last), dict), tail
