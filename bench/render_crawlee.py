"""The peer of bench/render.py: Crawlee's ``AdaptivePlaywrightCrawler`` (parsel for the
pages it fetches plainly, Playwright where its predictor says a page needs a browser)
on the system's Chromium, crawling the same site for the same items as the cluster's
universal spider with bench/render.py's rule for it:
- ``numeric`` (bench/crawl.py's following rule): every page's links to a host's ``/``,
  ``/list/N.html`` and ``/news/N.html``, and each ``/news/N.html`` an item;
- ``real`` (the magazine of manager/local/blogsite.py): every link of the host ending
  in ``/``, each article (``/2026/MM/<slug>/``, ``/live/<slug>/``) an item.
An item is the title, date and text. Written as Crawlee's adaptive-crawling guide writes
a handler: the selectors it needs are waited for
(``parse_with_static_parser(selector)``), so a page whose content its scripts write makes
the crawler render that kind of page.

  python bench/render_crawlee.py START_URL BROWSER OUT.json [numeric|real]

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

# per site: links followed, pages that are items, what every page has once its scripts
# ran, and the item's selectors (title, date, text)
SHAPES = {
    "numeric": (re.compile(r"^http://127\.0\.0\.\d+:\d+/(list/\d+\.html|news/\d+\.html)?$"),
                re.compile(r"/news/\d+\.html$"), "h1, ul.news-list",
                ("h1::text", "span.date::text", "div.content p::text")),
    "real": (re.compile(r"^http://127\.0\.0\.1:\d+/(?!static/)([^?#]*/)?$"),
             re.compile(r"/(2026/\d\d|live)/(?!page/)[^/]+/$"), "h1",
             ("h1.entry-title::text", "time.date::text", "div.entry-content p::text")),
}


async def crawl(start: str, browser: str, shape: str) -> dict[str, int]:
    follow, detail, content, (title, date, text) = SHAPES[shape]
    crawler = AdaptivePlaywrightCrawler.with_parsel_static_parser(
        playwright_crawler_specific_kwargs={"browser_launch_options": {
            "executable_path": browser, "args": ["--no-sandbox", "--disable-gpu"]}},
        concurrency_settings=ConcurrencySettings(desired_concurrency=16, max_concurrency=16),
        max_request_retries=2)

    @crawler.router.default_handler
    async def handler(context: AdaptivePlaywrightCrawlingContext) -> None:
        page = await context.parse_with_static_parser(content, timedelta(seconds=5))
        url = context.request.url
        links = [urljoin(url, href) for href in page.css("a::attr(href)").getall()]
        await context.add_requests([link for link in links if follow.match(link)])
        if detail.search(url):
            await context.push_data({
                "url": url, "title": page.css(title).get(), "date": page.css(date).get(),
                "content": "\n".join(page.css(text).getall())})

    await crawler.run([start])
    state = crawler.statistics.state
    items = await crawler.get_data()
    return {"items": len({item["url"] for item in items.items}),
            "requests": state.requests_finished,
            "rendered": getattr(state, "browser_request_handler_runs", 0)}


def main() -> None:
    start, browser, out = sys.argv[1:4]
    shape = sys.argv[4] if len(sys.argv) > 4 else "numeric"
    with open(out, "w") as file:
        json.dump(asyncio.run(crawl(start, browser, shape)), file)


if __name__ == "__main__":
    main()
