import sys

from outbox_relay.cli import main

sys.exit(main())
