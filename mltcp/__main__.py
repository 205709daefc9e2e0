"""``python -m mltcp``: the same as the ``mltcp`` command."""

import sys

from mltcp.cli import main

sys.exit(main())
