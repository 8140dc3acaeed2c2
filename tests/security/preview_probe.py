"""Previews of the SSRF targets, run inside the test's namespace (test_ssrf_preview.py):
``python -m tests.security.preview_probe URL...`` prints one JSON line per URL, the
preview's status or its error, with the settings of its environment."""

import json
import sys

from crawler.preview import PreviewError, preview
from crawler.preview.servers import PreviewServers
from manager.local.demo import UNIVERSAL_RULE
from settings.loader import load_settings
from tests.security.ssrfnet import SITE


def main(urls: list[str]) -> None:
    servers = PreviewServers(load_settings())
    request = {"url": f"http://{SITE}/index.html", "spider_type": "universal",
               "rule": UNIVERSAL_RULE}
    try:
        for url in urls:
            try:
                result = preview(request, servers.cluster(), url=url, with_html=True)
                shown = {"status": result["status"], "html": result.get("html", "")}
            except PreviewError as exc:
                shown = {"error": str(exc)}
            print(json.dumps({"url": url, **shown}), flush=True)
    finally:
        servers.close()


if __name__ == "__main__":
    main(sys.argv[1:])
