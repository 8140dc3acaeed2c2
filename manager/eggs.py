"""Deployed projects' eggs, bounded: scrapyd's storage keeping a project's newest versions.

Every ``scrapyd-deploy`` of a project adds a version (its egg) to each node, and
scrapyd keeps them all until ``delversion.json`` is called: a project deployed on every
change fills the node's disk over months. ``BoundedEggStorage`` is scrapyd's filesystem
storage that, once a version is added, deletes the project's oldest versions beyond
``KEEP_VERSIONS`` (never the one just added; the order is scrapyd's, by version). A job
scheduled with an explicit ``_version`` of a deleted one is refused by ``schedule.json``
("version not found"), as scrapyd refuses any unknown version.
"""

import logging
from typing import Any

from scrapyd.eggstorage import FilesystemEggStorage

logger = logging.getLogger(__name__)

KEEP_VERSIONS = 5


class BoundedEggStorage(FilesystemEggStorage):
    def put(self, eggfile: Any, project: str, version: str) -> None:
        super().put(eggfile, project, version)
        versions = [kept for kept in self.list(project) if kept != version]
        for old in versions[:max(0, len(versions) - (KEEP_VERSIONS - 1))]:
            self.delete(project, old)
            logger.info("project %s: version %s deleted, %d newer kept", project, old,
                        KEEP_VERSIONS)
