from lopa.cli import main

raise SystemExit(main())
