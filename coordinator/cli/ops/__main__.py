import sys

from coordinator.cli.ops import main

sys.exit(main())
