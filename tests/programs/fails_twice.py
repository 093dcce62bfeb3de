"""A stand-in slave that fails twice, then succeeds: it counts its runs in ``runs`` in its working folder
and exits 1 on the first two, 0 on the third (tests/test_overseer.py: a back end keeps a failed slave queued).
"""

from __future__ import annotations

import sys
from pathlib import Path

counter = Path("runs")
runs = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(runs))
sys.exit(0 if runs >= 3 else 1)
