"""Replies on the replies topic: scrapy-cluster's shapes, naming the request."""

import json
import time
from typing import Any

from message_processing.requests import Message, RequestError

# Fields copied from a request into its reply so the client can match it.
IDENTIFYING = ("uuid", "appid", "userid", "crawlid", "spiderid")


def reply_to(request: Message, **fields: Any) -> Message:
    """A reply carrying the request's identifying fields and the server time."""
    reply = {name: request[name] for name in IDENTIFYING if name in request}
    reply["server_time"] = int(time.time())
    reply.update(fields)
    return reply


def error_reply(where: str, error: RequestError, message: Any = None) -> Message:
    """The reply to a request that was refused: what it was and exactly why.

    ``where`` is ``topic/partition/offset``; ``message`` the decoded object, if
    it got that far (its uuid / crawlid name it).
    """
    fields: Message = {"status": "error", "error": error.reason, "message": where}
    if getattr(error, "field", None):
        fields["field"] = error.field
    if isinstance(message, dict):
        request = {name: message[name] for name in IDENTIFYING
                   if isinstance(message.get(name), str | int)}
        return reply_to(request, **fields)
    return reply_to({}, **fields)


def encode(reply: Message) -> bytes:
    return json.dumps(reply, sort_keys=True, ensure_ascii=False).encode("utf-8")
