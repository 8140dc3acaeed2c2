"""The cluster as a Scrapy add-on, for a Scrapy project of one's own.

In the project's settings::

    ADDONS = {"crawler.addon.ClusterAddon": 0}

sets ``SCHEDULER`` to the cluster's scheduler, adds the middlewares that report each
task's outcome and mark a page's requests with their task, and the process's guards
(``settings.defaults.CLUSTER_COMPONENTS``), and reads the ``CRAWLCLUSTER_*`` settings from
the environment and the settings file as every role does (a value the project sets
itself wins). The project's own pipelines, middlewares and settings run as under plain
Scrapy; Scrapy's retries are left to the cluster, which retries a failed task on another
job.
"""

from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

from settings.defaults import CLUSTER_COMPONENTS
from settings.loader import load_settings

SCHEDULER = "crawler.scheduler.ClusterScheduler"


class ClusterAddon:
    def update_settings(self, settings: BaseSettings) -> None:
        settings.set("SCHEDULER", SCHEDULER, priority="addon")
        for name, components in CLUSTER_COMPONENTS.items():
            for component, order in components.items():
                settings.set_in_component_priority_dict(name, load_object(component), order)
        for name, value in load_settings().items():
            settings.setdefault(name, value, priority="addon")
