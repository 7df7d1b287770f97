"""`python -m bench.rebalance`: the group-rebalance section alone (`section.py`; `--help` for its options)."""

import sys

from .section import main

sys.exit(main())
