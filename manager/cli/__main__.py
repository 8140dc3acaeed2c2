"""``python -m manager.cli``: the ``crawlcluster`` command."""

import sys

from manager.cli import main

sys.exit(main())
