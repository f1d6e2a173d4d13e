"""``python -m coordinator``: see :mod:`coordinator.cli.main`."""

import sys

from coordinator.cli.main import main

sys.exit(main())
