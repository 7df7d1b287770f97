"""`python -m bench.security`: the security section alone (`section.py`; `--help` for its options)."""

import sys

from .section import main

sys.exit(main())
