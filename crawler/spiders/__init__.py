"""Rule-driven spiders: ``precise`` (list then detail pages) and ``universal``.

Each takes its rule from the crawl the task belongs to (the scheduler puts
the crawl's config in ``response.meta["crawlcluster"]``), so one running
spider serves every crawl of its type.
"""

import scrapy


def first_value(selector, expression):
    """A field's text: every match stripped, the non-empty ones joined by newlines."""
    values = [value.strip() for value in selector.xpath(expression).getall()]
    return "\n".join(value for value in values if value)


def css_value(selector, expression):
    values = [value.strip() for value in selector.css(expression).getall()]
    return "\n".join(value for value in values if value)


class ClusterSpider(scrapy.Spider):
    """Base: no start requests of its own; tasks come from the cluster scheduler."""

    callbacks = ("parse",)

    async def start(self):
        return
        yield

    @staticmethod
    def crawl_info(response):
        return response.meta["crawlcluster"]

    def item(self, response, fields, url=None, page=False):
        info = self.crawl_info(response)
        item = dict(fields, url=url or response.url, crawlid=info["task"]["crawlid"],
                    spider_type=self.name, depth=info["task"].get("depth", 0))
        if page and info["config"]["rule"].get("main_text", True):
            item["_body"] = response.text
        return item
