import sys

from participant_sdk.cli import main

sys.exit(main())
