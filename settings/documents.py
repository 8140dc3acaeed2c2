"""Defaults of the documents a rule takes (crawler/documents.py).

They are part of ``settings.defaults``, which imports every name of this module, kept
apart only so neither module grows past the project's 500 lines. Same rules: the
``CRAWLCLUSTER_`` prefix, one comment line (or more) right above each setting, read into
docs/settings.md.
"""

# --- documents (crawler/documents.py, crawler/documentstore.py) ---------------------
# Where documents are stored, once each by content hash: a directory (or file://), or
# s3://bucket/prefix/ (Scrapy's AWS_* settings; AWS_ENDPOINT_URL for an S3-compatible
# store), gs://bucket/prefix/, ftp://user:pass@host/path/, or gridfs://<bucket> (a GridFS
# bucket in CRAWLCLUSTER_MONGODB_DATABASE).
CRAWLCLUSTER_DOCUMENTS_STORE = "~/.crawlcluster/documents"
# Bytes a document may have when its rule's `documents` names no `max_bytes`; a larger one
# is cancelled as it downloads and counted (crawlcluster/documents/failed/too_big).
CRAWLCLUSTER_DOCUMENTS_MAX_BYTES = 20 * 1024 * 1024
# Characters of a document's text kept in its item (the rest cut, `text_truncated` set).
CRAWLCLUSTER_DOCUMENTS_MAX_TEXT = 1_000_000
# Threads of a spider that read documents' text, apart from the reactor's (host names,
# item writes): at most this many files are read at once, however slow.
CRAWLCLUSTER_DOCUMENTS_READERS = 2
# Pages of a PDF whose text is read (the rest left out, `text_truncated` set).
CRAWLCLUSTER_DOCUMENTS_MAX_PAGES = 500
# Seconds a PDF's pages are read for; the pages left then are left out (`text_truncated`
# set): a file crafted to be slow holds a reader thread no longer than about this.
CRAWLCLUSTER_DOCUMENTS_READ_SECONDS = 30.0

# Scrapy components of documents, merged into ``SCRAPY`` by settings/defaults.py: the
# size limit of each document's download, and the store, first of the item pipelines
# (it takes the file's bytes out of the item before anything reads its fields).
DOCUMENT_MIDDLEWARES = {"crawler.documents.DocumentLimitMiddleware": 57}
DOCUMENT_PIPELINES = {"crawler.documentstore.DocumentPipeline": 50}
