from devstack.cli import main

raise SystemExit(main())
