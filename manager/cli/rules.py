"""Rules: ``try`` a crawl request's rule on one page before crawling (crawler/preview/)."""

import argparse
import json
from typing import Any

from manager.cli.common import read_file
from settings.errors import CrawlClusterError
from settings.loader import Settings

SHOWN = 8       # links of each fate listed in the readable output


def cmd_try(args: argparse.Namespace, settings: Settings) -> int:
    """Preview a page under the rule of a crawl request file: its items, its links'
    fates, how it would be read."""
    from crawler.preview import preview
    from crawler.preview.servers import PreviewServers

    try:
        request = json.loads(read_file(args.file))
    except json.JSONDecodeError as exc:
        raise CrawlClusterError(f"{args.file} is not JSON: {exc}") from None
    html = read_file(args.html) if args.html else None
    servers = PreviewServers(settings)
    try:
        result = preview(request, servers.cluster(), url=args.url, html=html, step=args.step,
                         crawlid=args.crawlid, render=args.render)
    finally:
        servers.close()
    print(json.dumps(result, indent=1, ensure_ascii=False) if args.json else readable(result))
    return 0


def readable(result: dict[str, Any]) -> str:
    """The preview as a person reads it: items and fields, then links by fate."""
    step = "" if result["step"] == "page" else result["step"] + " "
    lines = [(f"{result['url']}: {result['status']}, a {result['spider_type']} rule's "
             f"{step}page ({'fetched' if result['fetched'] else 'HTML given'}); "
             f"render: {describe_render(result['render'])}")]
    for number, item in enumerate(result["items"], 1):
        verdict = ("kept" if item["kept"] else
                   f"dropped: required {', '.join(item['dropped_for'])} missing")
        lines.append(f"item {number} ({item['item']['url']}): {verdict}")
        for name, field in item["fields"].items():
            value = field["value"]     # a processor's value may be a number, list or dict
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            shown = shown.replace("\n", " ")
            shown = shown if len(shown) <= 70 else shown[:69] + "…"
            lines.append(f"  {name:<16} {shown!r}" + (f"  ({field['missing']})"
                                                      if "missing" in field else ""))
        if "main_text" in item["item"]:
            lines.append(f"  {'main_text':<16} {len(item['item']['main_text'])} characters")
        lines += meta_lines(item["item"].get("meta") or {})
    if not result["items"]:
        lines.append("no item")
    lines += link_lines(result)
    return "\n".join(lines)


def meta_lines(meta: dict[str, Any]) -> list[str]:
    """The page's ``meta`` (crawler/pagemeta.py), one key a line with its source."""
    sources = meta.get("sources", {})
    return [f"  meta.{key:<11} {str(value)[:69]!r}  ({sources.get(key, '')})"
            for key, value in meta.items() if key != "sources"]


def describe_render(render: dict[str, Any]) -> str:
    described = render["mode"]
    if "looks_scripted" in render:
        described += (" (looks filled in by scripts: rendered)" if render["looks_scripted"]
                      else " (looks complete: read as fetched until its kind is known)")
    changes = render.get("rendered")
    if changes and "error" in changes:
        described += f"; {changes['error']}"
    elif changes:
        described += (f"; rendered, it adds {len(changes['links_added'])} links and fills "
                      f"{', '.join(changes['fields_filled']) or 'no field'}: "
                      + ("needs rendering" if changes["needs_rendering"] else "read as fetched"))
    return described


def link_lines(result: dict[str, Any]) -> list[str]:
    counts = result["link_counts"]
    refused = ", ".join(f"{reason} {n}" for reason, n in sorted(counts["refused"].items()))
    lines = [(f"links: {counts['found']} found, {counts.get('follow', 0)} followed, "
             f"{counts.get('seen', 0)} seen, {counts.get('duplicate', 0)} duplicate, "
             f"refused: {refused or 'none'}")]
    for fate in ("follow", "seen", "duplicate", "refused"):
        links = [link for link in result["links"] if link["fate"] == fate]
        for link in links[:SHOWN]:
            why = (f"rule {link['rule']}" if "rule" in link and link["rule"] is not None
                   else link.get("step") or link.get("reason") or "")
            lines.append(f"  {fate:<9} {why:<10} {link['url']}")
        if len(links) > SHOWN:
            lines.append(f"  {fate:<9} ... {len(links) - SHOWN} more (--json lists all)")
    return lines


def add_commands(commands: Any) -> None:
    command = commands.add_parser(
        "try", help="preview a page under a crawl request's rule: its items, each field, "
                    "every link's fate, before crawling")
    command.add_argument("file", metavar="FILE", help="a crawl request (JSON), as submitted")
    command.add_argument("url", nargs="?", help="the page (default: the request's url)")
    command.add_argument("--html", metavar="FILE", help="read the page from FILE, not the site")
    command.add_argument("--step", choices=["page", "list", "detail"],
                         help="a precise rule's list (default) or detail page")
    command.add_argument("--crawlid", help="a running crawl: mark the links it has seen")
    command.add_argument("--render", action="store_true",
                         help="a rule that renders: render the page too and say what changes")
    command.add_argument("--json", action="store_true", help="the whole preview as JSON")
    command.set_defaults(func=cmd_try)
