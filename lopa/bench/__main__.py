from lopa.bench.decoders import main

raise SystemExit(main())
