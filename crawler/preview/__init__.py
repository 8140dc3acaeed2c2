"""A preview of one page under a crawl's rule, on a crawl's own code path: the same
compiled rule, link extraction, refusal reasons, fields, required fields, main text and
render decision (``crawlcluster try``, the manager's ``preview.json``, the UI's rule
builder)."""

from crawler.preview.page import PreviewError, preview

__all__ = ["PreviewError", "preview"]
