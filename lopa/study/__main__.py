import sys

from lopa.study import STUDIES

if len(sys.argv) < 2 or sys.argv[1] not in STUDIES:
    print(f"usage: python -m lopa.study {{{','.join(STUDIES)}}} [options]   (--help after the name for its options)",
          file=sys.stderr)
    raise SystemExit(2)
raise SystemExit(STUDIES[sys.argv[1]].load().main(sys.argv[2:]))
