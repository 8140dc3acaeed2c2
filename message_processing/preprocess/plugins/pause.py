"""Pause or resume a crawl (``pause`` / ``resume``): carried out by the monitor's pause
plugin, as the manager's ``crawl.json`` does."""

from message_processing.preprocess.plugins import StoredRequestPlugin


class PausePlugin(StoredRequestPlugin):
    handles = ("pause", "resume")
