"""Rendered pages whose scripts aim at the SSRF targets, run inside the test's namespace
(test_ssrf_render.py).

``python -m tests.security.render_probe routed NAME...`` renders, for each target
``NAME`` of ssrfnet.TARGETS, a page of the public site whose script, iframe, image,
WebSocket and a redirect through the site aim at the target, in the crawler's
``Browser`` (every request answered by ``PageRequests``, its images loaded), Chromium
started without its resolver rules, so that ``PageRequests`` is the one defence. ``python -m
tests.security.render_probe unrouted NAME...`` loads the same page in Chromium started
with the crawler's arguments and no routing at all: Chromium's own resolver is the one
defence left. Each prints one JSON line per target: the page's text as the browser left
it, and the render's counters."""

import asyncio
import json
import os
import sys
from typing import Any

from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from crawler.render import browser as browser_module
from crawler.render.browser import Browser, browser_path, launch_args
from settings.loader import load_settings
from tests.security.ssrfnet import SITE, TARGETS


def attack_page(name: str, url: str) -> str:
    """A page of the public site aiming everything it can at ``url``; ``#ok`` gets the
    site's own page, which shows its scripts ran."""
    socket_url = url.replace("http://", "ws://", 1)
    script = f"""
const T = {json.dumps(url)};
const out = (id, v) => {{ document.getElementById(id).textContent = String(v); }};
fetch(T).then(r => r.text()).then(t => out("fetch", t), e => out("fetch", "refused"));
const x = new XMLHttpRequest();
x.open("POST", T); x.onload = () => out("xhr", x.responseText);
x.onerror = () => out("xhr", "refused"); x.send("action=stop");
fetch("/r/{name}").then(r => r.text()).then(t => out("redirect", t),
                                            e => out("redirect", "refused"));
try {{
  const ws = new WebSocket({json.dumps(socket_url)});
  ws.onopen = () => out("ws", "open"); ws.onerror = () => out("ws", "refused");
}} catch (e) {{ out("ws", "refused"); }}
fetch("/ok").then(r => r.text()).then(t => out("ok", t));
"""
    return (f'<html><body><iframe src="{url}"></iframe><img src="{url}">'
            '<p id="fetch"></p><p id="xhr"></p><p id="redirect"></p><p id="ws"></p>'
            f'<div id="ok"></div><script>{script}</script></body></html>')


class OpenThrottle:
    """The cluster throttle lets everything go (it is not what is tested here)."""

    async def let_go(self, url: str) -> bool:
        return True


async def routed(names: list[str]) -> None:
    # PageRequests tested alone: without the resolver rules, a request it let through
    # would connect
    browser_module.BROWSER_ARGS = tuple(arg for arg in browser_module.BROWSER_ARGS
                                        if not arg.startswith("--host-resolver-rules"))
    settings = dict(load_settings())
    crawler = get_crawler(settings_dict={**settings, "CRAWLCLUSTER_RENDER_QUIET_MAX": 3})
    browser = Browser(crawler, OpenThrottle())  # type: ignore[arg-type]
    try:
        for name in names:
            url = f"http://{SITE}/attack/{name}"
            document = HtmlResponse(url, body=attack_page(name, target_url(name)).encode(),
                                    encoding="utf-8")
            rendered = await browser.render(Request(url), document, load=("image",))
            stats = {key.removeprefix("crawlcluster/render/"): value
                     for key, value in crawler.stats.get_stats().items()}
            print(json.dumps({"name": name, "text": rendered.xpath("string(//body)").get(),
                              "stats": stats}), flush=True)
    finally:
        await browser.close()


async def unrouted(names: list[str]) -> None:
    from playwright.async_api import async_playwright

    args, sandbox = launch_args(os.geteuid())
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=browser_path(""), args=list(args), chromium_sandbox=sandbox)
        try:
            for name in names:
                page = await chromium.new_page()
                await page.set_content(attack_page(name, target_url(name)))
                await page.wait_for_timeout(3000)
                text = await page.inner_text("body")
                await page.close()
                print(json.dumps({"name": name, "text": text, "stats": {}}), flush=True)
        finally:
            await chromium.close()


def target_url(name: str) -> str:
    return next(target.url for target in TARGETS if target.name == name)


def main(mode: str, names: list[str]) -> None:
    run: Any = routed if mode == "routed" else unrouted
    asyncio.run(run(names))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
