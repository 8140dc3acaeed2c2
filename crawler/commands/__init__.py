"""Scrapy commands of the crawler project (``COMMANDS_MODULE``)."""
