"""A crawl's items out of MongoDB as a file: ``crawlcluster export`` and the web UI's
download links (``export`` on every manager).

One pass over the crawl's items (a cursor over each ``items_<spider type>``
collection, in the order they were stored) in constant memory, whatever the size:

- JSON lines: each item is written as it is read;
- CSV and Parquet need their columns first, and the items of one crawl may have
  different fields (rules, sitemap entries): the pass writes JSON lines to a
  temporary file while it learns the columns (and, for Parquet, their types), then
  that file is turned into CSV rows, or Parquet row groups, a slice at a time.

Every item has ``id`` (its MongoDB ``_id``), then its stored fields; a value that is not
a string, a number or a boolean (a list, an object) is written as JSON in CSV and
Parquet. ``--since`` keeps the items stored at or after a time (``stored_at``);
``--changed-since`` those that became new, changed or gone at or after it (``changed_at``).
"""

import csv
import io
import json
import re
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import IO, Any

from settings.errors import CrawlClusterError
from settings.loader import Settings

FORMATS = ("jsonl", "csv", "parquet")
MEDIA_TYPES = {"jsonl": "application/x-ndjson", "csv": "text/csv; charset=utf-8",
               "parquet": "application/vnd.apache.parquet"}
FIRST_COLUMNS = ("id", "crawlid", "url", "spider_type", "status", "fetched_at", "stored_at")
ROW_GROUP = 10_000        # Parquet rows written at a time
CURSOR_BATCH = 1_000      # items read from MongoDB at a time, CSV rows written at a time
EXPORT_TIMEOUT = 600.0    # seconds MongoDB may take to answer an export's query
Item = dict[str, Any]
Out = IO[bytes] | io.RawIOBase          # a file, or a manager's HTTP response
Progress = Callable[[int], None]        # called with the number of items read so far


class ExportError(CrawlClusterError):
    """An export that cannot be made, and why."""


def parse_since(text: str) -> float:
    """Seconds since the epoch, from the epoch itself or an ISO 8601 date or time (UTC
    unless it names a zone)."""
    if re.fullmatch(r"\d+(\.\d+)?", text.strip()):
        return float(text)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ExportError(f"--since {text!r}: give seconds since the epoch or an ISO 8601 "
                          "date or time (2026-11-25, 2026-11-25T08:00:00+01:00)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def export_client(settings: Settings, role: str) -> Any:
    """A MongoDB client whose replies may take ``EXPORT_TIMEOUT``: counting or skipping
    through a million items (``--since``) takes the server longer than a role's socket
    timeout allows. pymongo's monitor checks the server with the connect timeout, and a
    server busy with such a query (the local MongoDB-wire server answers one at a time)
    would be taken for down and the query cancelled: it gets the same patience. A server
    that is down still fails at once (the connection is refused)."""
    from settings.clients import mongo_client

    patience = int(EXPORT_TIMEOUT * 1000)
    return mongo_client(settings, role, socketTimeoutMS=patience, connectTimeoutMS=patience)


class CrawlItems:
    """The stored items of one crawl (since a time), read with a cursor."""

    def __init__(self, database: Any, crawlid: str, since: float | None = None,
                 changed_since: float | None = None) -> None:
        self.database = database
        self.query: dict[str, Any] = {"crawlid": crawlid}
        if since is not None:
            self.query["stored_at"] = {"$gte": since}
        if changed_since is not None:      # new, changed or gone since (crawler/versions.py)
            self.query["changed_at"] = {"$gte": changed_since}
        self.collections = sorted(name for name in database.list_collection_names()
                                  if name.startswith("items_"))

    def count(self) -> int:
        return sum(self.database[name].count_documents(self.query)
                   for name in self.collections)

    def __iter__(self) -> Iterator[Item]:
        for name in self.collections:
            for document in self.database[name].find(self.query, batch_size=CURSOR_BATCH):
                yield {"id": str(document.pop("_id")), **document}


def export_items(items: CrawlItems, fmt: str, out: Out,
                 progress: Progress = lambda _: None) -> int:
    """Write ``items`` to ``out`` in ``fmt``; return how many."""
    if fmt == "jsonl":
        return _write_jsonl(items, out, progress)
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    write = _write_csv if fmt == "csv" else _write_parquet
    with tempfile.TemporaryFile() as spool:
        columns = Columns()
        count = _write_jsonl(items, spool, progress, columns.see)
        spool.seek(0)
        write(spool, columns, out)
    return count


def _write_jsonl(items: CrawlItems, out: Out, progress: Progress,
                 see: Callable[[Item], None] = lambda _: None) -> int:
    count = 0
    for item in items:
        see(item)
        out.write(json.dumps(item, ensure_ascii=False, default=str).encode("utf-8") + b"\n")
        count += 1
        if count % CURSOR_BATCH == 0:
            progress(count)
    progress(count)
    return count


class Columns:
    """The columns seen in order (``FIRST_COLUMNS`` first) and the kinds of value in each."""

    def __init__(self) -> None:
        self.kinds: dict[str, set[str]] = {name: set() for name in FIRST_COLUMNS}

    def see(self, item: Item) -> None:
        for name, value in item.items():
            if value is not None:
                self.kinds.setdefault(name, set()).add(_kind(value))

    @property
    def names(self) -> list[str]:
        """Every column with a value, or the first columns when there were no items."""
        return [name for name, kinds in self.kinds.items()
                if kinds or name not in FIRST_COLUMNS] or list(FIRST_COLUMNS)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "string"


def _column_kind(kinds: set[str]) -> str:
    """One kind for a column's values: ints among floats are floats, mixed are strings."""
    if kinds == {"int", "float"}:
        return "float"
    return next(iter(kinds)) if len(kinds) == 1 else "string"


def _rows(spool: IO[bytes], size: int) -> Iterator[list[Item]]:
    """The spooled items, ``size`` at a time."""
    rows: list[Item] = []
    for line in spool:
        rows.append(json.loads(line))
        if len(rows) == size:
            yield rows
            rows = []
    if rows:
        yield rows


def _cell(value: Any) -> Any:
    """A value as one cell: scalars as they are, anything else as JSON."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, ensure_ascii=False)


def _write_csv(spool: IO[bytes], columns: Columns, out: Out) -> None:
    names = columns.names
    _write_csv_rows(out, [names])
    for rows in _rows(spool, CURSOR_BATCH):
        _write_csv_rows(out, [["" if (cell := _cell(row.get(name))) is None else cell
                               for name in names] for row in rows])


def _write_csv_rows(out: Out, rows: list[list[Any]]) -> None:
    text = io.StringIO(newline="")
    csv.writer(text).writerows(rows)
    out.write(text.getvalue().encode("utf-8"))


def _write_parquet(spool: IO[bytes], columns: Columns, out: Out) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError("Parquet needs pyarrow: pip install 'crawlcluster[parquet]'") from None
    types = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64()}
    fields = [pa.field(name, types.get(_column_kind(columns.kinds[name]), pa.string()))
              for name in columns.names]
    schema = pa.schema(fields)
    strings = [field.name for field in fields if field.type == pa.string()]
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
        for rows in _rows(spool, ROW_GROUP):
            for row in rows:
                for name in strings:
                    value = row.get(name)
                    if value is not None and not isinstance(value, str):
                        row[name] = json.dumps(value, ensure_ascii=False)
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))


def file_name(crawlid: str, fmt: str) -> str:
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', crawlid)}.{fmt}"


def progress_bar(done: int, total: int, width: int = 30) -> str:
    filled = round(width * done / total) if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} items"
