import sys

from coordinator.opscli import main

sys.exit(main())
