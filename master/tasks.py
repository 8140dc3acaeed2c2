"""A crawl task: one URL to fetch for one crawl, as the JSON stored in Redis.

Tasks are small; the crawl's rule and config are stored once per crawl.
Encoding is canonical (sorted keys, compact), so the same task is the same
member of a sorted set.
"""

import json
import re
import uuid
from typing import Any

from master.siteconfig import domain_of

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


Task = dict[str, Any]     # a task as JSON decodes it (see make_task for its fields)


def check_name(kind: str, value: Any) -> str:
    """A job id, spider type or crawl id: letters, digits, ``_.-``; else ValueError."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(f"bad {kind} {value!r}: use 1-128 letters, digits, '_', '.', '-'")
    return value


def make_task(url: str, crawlid: str, spider_type: str, priority: float = 0, depth: int = 0,
              userid: str | None = None, domain: str | None = None, **extra: Any) -> Task:
    """A new task dict (with a fresh id and the domain it is throttled under, unless
    the caller knows it already)."""
    task = {
        "id": uuid.uuid4().hex,
        "url": url,
        "crawlid": check_name("crawl id", crawlid),
        "spider_type": check_name("spider type", spider_type),
        "domain": domain or domain_of(url),
        "priority": priority,
        "depth": depth,
    }
    if userid is not None:
        task["userid"] = userid
    task.update(extra)
    return task


def encode_task(task: Task) -> str:
    return json.dumps(task, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def decode_task(member: str | bytes) -> Task:
    task: Task = json.loads(member)
    return task


def seed_score(task: Task) -> float:
    """Sorted-set score: the highest priority pops first."""
    return -float(task.get("priority") or 0)
