"""`python -m bench.attacks`: the attacks section alone (`section.py`; `--help` for its options)."""

import sys

from .section import main

sys.exit(main())
