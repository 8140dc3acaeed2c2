"""The Scrapy project run on slave nodes (``scrapy crawl <spider_type>``)."""
