"""The one exception hierarchy of crawlcluster.

Library code raises these; only entry points (the CLI) turn them into an exit
status and a one-line message.
"""


class CrawlClusterError(Exception):
    """Root of every error crawlcluster raises on purpose."""


class ConfigError(CrawlClusterError):
    """A setting, settings file or environment override is invalid."""


class ServerUnreachable(CrawlClusterError):
    """A configured server did not answer the start-up check.

    The message names the role, the server kind, its address, the reason and
    what to check, so it can be printed as is.
    """

    def __init__(self, role: str, kind: str, address: str, reason: str, hint: str):
        self.role = role
        self.kind = kind
        self.address = address
        self.reason = reason
        self.hint = hint
        super().__init__(
            f"{role}: cannot reach {kind} at {address}: {reason} ({hint})"
        )


class ServiceError(CrawlClusterError):
    """A local server could not be installed, started or stopped."""
