"""``python -m mwpy`` is the ``mwpy`` command."""

import sys

from mwpy.cli import main

sys.exit(main())
