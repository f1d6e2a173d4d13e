"""``python -m coordinator``: see :mod:`coordinator.cli`."""

import sys

from coordinator.cli import main

sys.exit(main())
