"""Monitor: answers stored queries and runs stored commands (``crawlcluster monitor``)."""
