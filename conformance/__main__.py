"""``python -m conformance``: the suite's tools (``new-adapter``; see :mod:`conformance.scaffold`)."""

import sys

from conformance.scaffold import main

sys.exit(main())
