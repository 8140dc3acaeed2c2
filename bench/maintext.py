"""Main-text benchmark: crawlcluster's extractor against trafilatura on real pages.

  python bench/maintext.py [--pages DIR] [--genres DIR] [--show N]

The 181 real news and blog pages of the article-extraction benchmark (a copy of
scrapinghub/article-extraction-benchmark's data; ``--pages`` points at it), each
with the article body written by people; then, in the same run, the 570 pages of
twelve genres of the maintext-genres benchmark (``--genres``), scored by its own
``score.py`` for us and trafilatura (both from the HTML; F1 per genre and language,
pages with no output, seconds). On every news page:
  1. crawlcluster: ``crawler.maintext.extract_main_text`` on the page already parsed
     (the tree a spider's response has; the parse is timed apart, ``parse_ms_per_page``);
  2. trafilatura: ``trafilatura.extract`` with its defaults, on the HTML (it parses);
  3. the floor: every visible text of the page.
Scored with the benchmark's own metric (4-token shingles, see ``score_page``). CPU
time is process time, the extractors taking turns on each page (a VM's drift in speed
touches them alike). ``--show N`` prints the N pages where we score lowest. The last
line is one JSON object.
"""

import argparse
import gzip
import json
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import finish, machine, require_peers  # noqa: E402
from crawler.maintext import extract_main_text, visible_text  # noqa: E402

DEFAULT_PAGES = ROOT.parent / "shared" / "benchmarks" / "article-extraction"
DEFAULT_GENRES = ROOT.parent / "shared" / "benchmarks" / "maintext-genres"
OURS = "crawler.maintext:extract_main_text"
MIN_GENRE_PAGES = 20            # genres this large count for the lowest ratio
_TOKEN = re.compile(r"\w+")
WARM_UP = f"<html><body><article><p>{'A sentence of a warm-up page. ' * 20}</p></article>"


def shingles(text, size=4):
    """The text's runs of ``size`` consecutive ``\\w+`` tokens, with multiplicity (a text
    of fewer tokens is one shingle of all of them)."""
    tokens = _TOKEN.findall(text or "")
    if len(tokens) < size:
        return Counter([tuple(tokens)]) if tokens else Counter()
    return Counter(tuple(tokens[i:i + size]) for i in range(len(tokens) - size + 1))


def score_page(truth, prediction):
    """``(tp, fp, fn)`` of one page as shares of their sum (long pages weigh no more
    than short ones)."""
    expected, got = shingles(truth), shingles(prediction)
    tp = fp = fn = 0
    for shingle in expected.keys() | got.keys():
        t, p = expected[shingle], got[shingle]
        tp, fp, fn = tp + min(t, p), fp + max(0, p - t), fn + max(0, t - p)
    total = tp + fp + fn
    return (tp / total, fp / total, fn / total) if total else (0.0, 0.0, 0.0)


def _share(tp, wrong, other_wrong):
    if wrong == 0 and other_wrong == 0:
        return 1.0
    if tp == 0 and wrong == 0:
        return 0.0
    return tp / (tp + wrong)


def summarize(scores):
    """Precision, recall and F1 over pages' ``(tp, fp, fn)``, as the benchmark does."""
    precisions = [_share(tp, fp, fn) for tp, fp, fn in scores if tp + fp > 0]
    recalls = [_share(tp, fn, fp) for tp, fp, fn in scores if tp + fn > 0]
    precision = statistics.fmean(precisions) if precisions else 0.0
    recall = statistics.fmean(recalls) if recalls else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def load_pages(directory):
    """``[(id, html, truth)]`` in id order."""
    truth = json.loads((directory / "ground-truth.json").read_text(encoding="utf-8"))
    return [(page_id, gzip.decompress((directory / "html" / f"{page_id}.html.gz")
                                      .read_bytes()).decode("utf-8", "replace"),
             truth[page_id]["articleBody"]) for page_id in sorted(truth)]


def parse(page):
    """The tree a spider's response has (parsel's, as ``response.selector.root``)."""
    from parsel import Selector

    return Selector(text=page).root


def run_extractors(extractors, pages, truths):
    """Run the extractors in turn on each page and score them;
    ``{name: (result, scores, outputs)}``."""
    outputs = {name: [] for name in extractors}
    cpu = dict.fromkeys(extractors, 0.0)
    for page in pages:
        for name, (extract, takes) in extractors.items():
            value = page[takes]
            started = time.process_time()
            outputs[name].append(extract(value))
            cpu[name] += time.process_time() - started
    results = {}
    for name in extractors:
        scores = [score_page(truth, output)
                  for truth, output in zip(truths, outputs[name], strict=True)]
        result = summarize(scores)
        result["cpu_ms_per_page"] = cpu[name] * 1000 / len(pages)
        print(f"{name:<14} F1 {result['f1']:.3f}  precision {result['precision']:.3f}  "
              f"recall {result['recall']:.3f}  {result['cpu_ms_per_page']:.2f} CPU ms/page",
              flush=True)
        results[name] = (result, scores, outputs[name])
    return results


def trafilatura_extract(page):
    import trafilatura

    return trafilatura.extract(page) or ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pages", type=Path, default=DEFAULT_PAGES,
                        help="the benchmark's directory (ground-truth.json, html/)")
    parser.add_argument("--genres", type=Path, default=DEFAULT_GENRES,
                        help="the maintext-genres benchmark's directory (score.py, html/)")
    parser.add_argument("--show", type=int, default=0,
                        help="print our N lowest-scoring pages")
    args = parser.parse_args()
    require_peers("trafilatura", "lxml_html_clean")
    if not (args.pages / "ground-truth.json").is_file():
        parser.error(f"no benchmark pages in {args.pages}: clone "
                     "https://github.com/scrapinghub/article-extraction-benchmark and pass "
                     "--pages with its directory")
    pages = load_pages(args.pages)
    ids = [page_id for page_id, _, _ in pages]
    truths = [truth for _, _, truth in pages]
    print(f"{len(pages)} pages from {args.pages}; {machine()}", flush=True)

    started = time.process_time()
    trees = [parse(page) for _, page, _ in pages]
    parse_ms = (time.process_time() - started) * 1000 / len(pages)
    extractors = {"crawlcluster": (extract_main_text, "tree"),
                  "trafilatura": (trafilatura_extract, "html"),
                  "whole page": (visible_text, "tree")}
    for extract, takes in extractors.values():        # imports and first-call set-up
        extract(parse(WARM_UP) if takes == "tree" else WARM_UP)
    results = run_extractors(extractors, [{"tree": tree, "html": page} for tree, (_, page, _)
                                          in zip(trees, pages, strict=True)], truths)
    (ours, our_scores, our_texts), (peer, _, _), (floor, _, _) = results.values()
    if args.show:
        _show_worst(ids, our_scores, our_texts, truths, args.show)
    summary = {
        "pages": len(pages),
        "f1": ours["f1"], "precision": ours["precision"], "recall": ours["recall"],
        "cpu_ms_per_page": ours["cpu_ms_per_page"],
        "cpu_measured_on": "the parsed tree, as in the spider",
        "parse_ms_per_page": parse_ms,
        "trafilatura_f1": peer["f1"], "trafilatura_precision": peer["precision"],
        "trafilatura_recall": peer["recall"],
        "trafilatura_cpu_ms_per_page": peer["cpu_ms_per_page"],
        "floor_f1": floor["f1"], "floor_precision": floor["precision"],
        "floor_recall": floor["recall"],
        "vs_trafilatura_f1": ours["f1"] / peer["f1"],
        "cpu_vs_trafilatura": ours["cpu_ms_per_page"] / peer["cpu_ms_per_page"],
    }
    print(f"ours over trafilatura: F1 {summary['vs_trafilatura_f1']:.3f}x, "
          f"CPU {summary['cpu_vs_trafilatura']:.3f}x")
    summary |= genre_scores(args.genres)
    finish(summary)


def genre_scores(directory):
    """The maintext-genres benchmark, scored by its own ``score.py`` for us and
    trafilatura in one run; the figures for the summary."""
    import os
    import subprocess

    scorer = directory / "score.py"
    if not scorer.is_file():
        raise SystemExit(f"no maintext-genres benchmark in {directory} (--genres)")
    run = subprocess.run([sys.executable, str(scorer), OURS, "trafilatura"],
                         capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    print(run.stdout.rsplit("\n{", 1)[0], flush=True)        # its tables
    results = json.loads(run.stdout.strip().splitlines()[-1])["results"]
    ours, peer = results[OURS], results["trafilatura"]
    ratios = {genre: ours["genre"][genre]["f1"] / peer["genre"][genre]["f1"]
              for genre in ours["genre"]}
    counted = {genre: ratio for genre, ratio in ratios.items()
               if ours["genre"][genre]["n"] >= MIN_GENRE_PAGES}
    counted = counted or ratios        # a sample too small for any genre to count: all
    lowest = min(counted, key=counted.__getitem__)
    return {
        "genres_pages": ours["all"]["n"],
        "genres_f1": ours["all"]["f1"], "genres_recall": ours["all"]["recall"],
        "genres_precision": ours["all"]["precision"],
        "genres_trafilatura_f1": peer["all"]["f1"],
        "genres_vs_trafilatura": ours["all"]["f1"] / peer["all"]["f1"],
        "genres_min_ratio": counted[lowest], "genres_min_ratio_genre": lowest,
        "genres_ratio_by_genre": {genre: round(ratio, 3) for genre, ratio in ratios.items()},
        "genres_f1_by_lang": {lang: scores["f1"] for lang, scores in ours["lang"].items()},
        "empty_pages": ours["all"]["empty"], "trafilatura_empty_pages": peer["all"]["empty"],
        "genres_seconds_vs_trafilatura": ours["seconds"] / peer["seconds"],
    }


def _show_worst(ids, scores, texts, truths, count):
    ranked = sorted(range(len(ids)), key=lambda i: summarize([scores[i]])["f1"])
    for index in ranked[:count]:
        result = summarize([scores[index]])
        print(f"--- {ids[index]}  F1 {result['f1']:.2f}  P {result['precision']:.2f}  "
              f"R {result['recall']:.2f}\n  truth: {truths[index][:160]!r}\n"
              f"  ours:  {texts[index][:160]!r}")


if __name__ == "__main__":
    main()
