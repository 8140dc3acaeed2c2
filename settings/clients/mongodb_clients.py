"""MongoDB clients (pymongo), with timeouts and a start-up check."""

from typing import TYPE_CHECKING, Any

from settings.clients.common import first_line, timeouts, unreachable

if TYPE_CHECKING:
    from pymongo import MongoClient

    from settings.loader import Settings


def mongo_client(settings: "Settings", role: str, check: bool = True,
                 **options: Any) -> "MongoClient[Any]":
    """A pymongo MongoClient with timeouts (``options`` override them), checked with a
    ``ping``."""
    from pymongo import MongoClient
    from pymongo.errors import PyMongoError

    connect_timeout, socket_timeout = timeouts(settings)
    client: MongoClient[Any] = MongoClient(
        settings["CRAWLCLUSTER_MONGODB_URL"],
        **{"connectTimeoutMS": int(connect_timeout * 1000),
           "serverSelectionTimeoutMS": int(connect_timeout * 1000),
           "socketTimeoutMS": int(socket_timeout * 1000),
           "appname": f"crawlcluster-{role}", **options},
    )
    if check:
        try:
            client.admin.command("ping")
        except PyMongoError as exc:
            client.close()
            raise unreachable(role, settings, "mongodb", first_line(exc)) from None
    return client

def mongo_version(settings: "Settings") -> str:
    client = mongo_client(settings, "ping")
    try:
        return "mongodb " + str(client.server_info().get("version", "?"))
    finally:
        client.close()
