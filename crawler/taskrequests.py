"""A user spider's Request as the JSON a frontier task carries, and back.

A task is JSON (never pickle): ``request_to_json`` is Scrapy's ``Request.to_dict`` (the
callback and errback by name, the class as ``_class``) with its bytes made text
(headers latin-1, the body UTF-8 or ``body_base64``) and every field a new Request has
anyway left out, so a plain ``GET`` is ``{"url": ...}``. Every value is checked to be
JSON first: one that is not (an object in ``meta``, a set in ``cb_kwargs``) raises
``RequestNotJSON``, naming the spider, the callback and the key, at the yield.
``request_from_json`` makes the Request again, its callbacks looked up on the spider.
The cluster's own keys in ``meta`` (``crawlcluster*``) are not carried: a task gets its
own when it is taken.
"""

import base64
from collections.abc import Mapping
from typing import Any

from scrapy import Request, Spider
from scrapy.utils.request import request_from_dict

from settings.errors import CrawlClusterError

JSON = dict[str, Any]
_DEFAULTS: JSON = {"callback": None, "errback": None, "headers": {}, "method": "GET",
                   "body": b"", "cookies": {}, "meta": {}, "encoding": "utf-8",
                   "priority": 0, "dont_filter": False, "flags": [], "cb_kwargs": {}}
# Fields checked to hold JSON values (url, method and the rest are Scrapy's own types).
_USER_VALUES = ("meta", "cb_kwargs", "cookies")


class RequestNotJSON(CrawlClusterError, TypeError):
    """A Request carries a value a task cannot hold as JSON."""


def request_to_json(request: Request, spider: Spider) -> JSON:
    """The task fields of ``request`` (see the module's docstring)."""
    data = _request_dict(request, spider)
    data["meta"] = {key: value for key, value in data.get("meta", {}).items()
                    if not str(key).startswith("crawlcluster")}
    callback = data.get("callback") or "parse"
    for field in _USER_VALUES:
        _check_json(data.get(field), f"{field}", spider, callback)
    data["headers"] = {_text(name): [_text(value) for value in values]
                       for name, values in data.get("headers", {}).items()}
    body = data.pop("body", b"")
    out = {key: value for key, value in data.items()
           if key not in _DEFAULTS or value != _DEFAULTS[key]}
    if body:
        try:
            out["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            out["body_base64"] = base64.b64encode(body).decode("ascii")
    return out


def _request_dict(request: Request, spider: Spider) -> JSON:
    """``request.to_dict(spider=spider)``, the callbacks named without Scrapy's search of
    every member of the spider (``inspect.getmembers``, most of its cost) when they are
    the spider's own methods, as they nearly always are."""
    names = [_method_name(request.callback, spider), _method_name(request.errback, spider)]
    if any(name is _UNKNOWN for name in names):
        return request.to_dict(spider=spider)      # Scrapy finds it, or says why not
    data: JSON = {"url": request.url, "callback": names[0], "errback": names[1],
                  "headers": dict(request.headers)}
    for attribute in request.attributes:
        data.setdefault(attribute, getattr(request, attribute))
    if type(request) is not Request:
        data["_class"] = f"{type(request).__module__}.{type(request).__name__}"
    return data


_UNKNOWN = object()


def _method_name(function: Any, spider: Spider) -> Any:
    """The name of a callback that is a method of ``spider``; the value itself if it is
    not callable (a name, or None); else ``_UNKNOWN``."""
    if not callable(function):
        return function
    name = getattr(function, "__name__", None)
    if (name and getattr(function, "__self__", None) is spider
            and getattr(type(spider), name, None) is getattr(function, "__func__", None)):
        return name
    return _UNKNOWN


def request_from_json(data: Mapping[str, Any], spider: Spider) -> Request:
    """The Request ``request_to_json`` gave these fields of."""
    fields = dict(data)
    if "body_base64" in fields:
        fields["body"] = base64.b64decode(fields.pop("body_base64"))
    elif "body" in fields:
        fields["body"] = fields["body"].encode("utf-8")
    fields["headers"] = {name: [value.encode("latin-1") for value in values]
                         for name, values in fields.get("headers", {}).items()}
    return request_from_dict(fields, spider=spider)


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _check_json(value: Any, path: str, spider: Spider, callback: str) -> None:
    if value is None or isinstance(value, (str, bool, int, float)):
        return
    if isinstance(value, (list, tuple)):
        for number, element in enumerate(value):
            _check_json(element, f"{path}[{number}]", spider, callback)
        return
    if isinstance(value, dict):
        for key, element in value.items():
            if not isinstance(key, str):
                raise RequestNotJSON(_refusal(spider, callback, path,
                                              f"a key {key!r} that is not a string"))
            _check_json(element, f"{path}[{key!r}]", spider, callback)
        return
    raise RequestNotJSON(_refusal(spider, callback, path,
                                  f"a {type(value).__name__}, which is not JSON"))


def _refusal(spider: Spider, callback: str, path: str, what: str) -> str:
    return (f"spider {spider.name!r}, callback {callback!r}: request {path} holds {what}; "
            f"a cluster task is JSON (str, number, bool, None, list, dict of str keys)")
