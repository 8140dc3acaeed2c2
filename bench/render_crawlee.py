"""The peer of bench/render.py: Crawlee's ``AdaptivePlaywrightCrawler`` (parsel for the
pages it fetches plainly, Playwright where its predictor says a page needs a browser)
on the system's Chromium, crawling the same site for the same items as the cluster's
universal spider with bench/crawl.py's following rule: every page's links to a host's
``/``, ``/list/N.html`` and ``/news/N.html``, and each ``/news/N.html`` an item (title,
date, text). Written as Crawlee's adaptive-crawling guide writes a handler: the
selectors it needs are waited for (``parse_with_static_parser(selector)``), so a page
whose content its scripts write makes the crawler render that kind of page.

  python bench/render_crawlee.py START_URL BROWSER OUT.json

Writes ``{"items": N, "requests": N, "rendered": N}`` to OUT.json.
"""

import asyncio
import json
import re
import sys
from datetime import timedelta
from urllib.parse import urljoin

from crawlee import ConcurrencySettings
from crawlee.crawlers import AdaptivePlaywrightCrawler, AdaptivePlaywrightCrawlingContext

FOLLOW = re.compile(r"^http://127\.0\.0\.\d+:\d+/(list/\d+\.html|news/\d+\.html)?$")
DETAIL = re.compile(r"/news/\d+\.html$")
# what every page of the site has once its scripts ran: the index's or an article's
# heading, a list's items
CONTENT = "h1, ul.news-list"


async def crawl(start: str, browser: str) -> dict[str, int]:
    crawler = AdaptivePlaywrightCrawler.with_parsel_static_parser(
        playwright_crawler_specific_kwargs={"browser_launch_options": {
            "executable_path": browser, "args": ["--no-sandbox", "--disable-gpu"]}},
        concurrency_settings=ConcurrencySettings(desired_concurrency=16, max_concurrency=16),
        max_request_retries=2)

    @crawler.router.default_handler
    async def handler(context: AdaptivePlaywrightCrawlingContext) -> None:
        page = await context.parse_with_static_parser(CONTENT, timedelta(seconds=5))
        url = context.request.url
        links = [urljoin(url, href) for href in page.css("a::attr(href)").getall()]
        await context.add_requests([link for link in links if FOLLOW.match(link)])
        if DETAIL.search(url):
            await context.push_data({
                "url": url, "title": page.css("h1::text").get(),
                "date": page.css("span.date::text").get(),
                "content": "\n".join(page.css("div.content p::text").getall())})

    await crawler.run([start])
    state = crawler.statistics.state
    items = await crawler.get_data()
    return {"items": len({item["url"] for item in items.items}),
            "requests": state.requests_finished,
            "rendered": getattr(state, "browser_request_handler_runs", 0)}


def main() -> None:
    start, browser, out = sys.argv[1:4]
    with open(out, "w") as file:
        json.dump(asyncio.run(crawl(start, browser)), file)


if __name__ == "__main__":
    main()
