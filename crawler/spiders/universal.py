"""The ``universal`` spider (thesis 4.3.1.3, tables 4-10 and 4-11): link rules.

Every page is matched against the crawl's rules in order; the first rule
whose link extractor takes a link decides how the page it leads to is
handled: items from its ``fields``, its links followed if ``follow``. The
crawl's seed page is followed with every rule.
"""

from crawler.rules import compile_universal, field_selector
from crawler.spiders import ClusterSpider, Follow, css_value, first_value


class UniversalSpider(ClusterSpider):
    name = "universal"

    def parse(self, response):
        info = self.crawl_info(response)
        rules = compile_universal(info["config"]["rule"])
        index = info["task"].get("rule_index")
        matched = rules[index] if index is not None and index < len(rules) else None
        if matched is not None and matched.fields:
            yield self.item(response, self._fields(response, matched.fields), page=True)
        if matched is None or matched.follow:
            yield from self.follow(response, self._links(response, rules))

    @staticmethod
    def _fields(response, specs):
        fields = {}
        for name, spec in specs.items():
            kind, expression = field_selector(spec)
            fields[name] = (css_value if kind == "css" else first_value)(response, expression)
        return fields

    @staticmethod
    def _links(response, rules):
        """Every link of the page once, with the index of the first rule that takes it."""
        links, seen = [], set()
        for index, rule in enumerate(rules):
            for link in rule.extractor.extract_links(response):
                if link.url not in seen:
                    seen.add(link.url)
                    links.append(Follow(link.url, "parse", {"rule_index": index}))
        return links
