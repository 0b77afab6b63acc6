import sys

if sys.argv[1:2] == ["filter"]:            # python -m lopa.train filter --model DIR: the commit filter (lopa/train/filter.py)
    from lopa.train.filter import main as filter_main
    raise SystemExit(filter_main(sys.argv[2:]))

from lopa.train.trainer import main

raise SystemExit(main())
