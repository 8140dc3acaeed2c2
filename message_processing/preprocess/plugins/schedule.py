"""Recurring crawls (``schedule``: add, list, pause, resume, delete): checked here (the
cron expression or interval, and the crawl as a crawl request), carried out by the
monitor's schedule plugin."""

from message_processing.preprocess.plugins import StoredRequestPlugin


class SchedulePlugin(StoredRequestPlugin):
    handles = ("schedule",)
