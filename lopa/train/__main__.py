from lopa.train.trainer import main

raise SystemExit(main())
