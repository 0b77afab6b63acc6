from lopa.study import main

raise SystemExit(main())
