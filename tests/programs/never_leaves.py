"""A stand-in slave that never leaves by itself (for a minute): only its batch system can end it."""

from __future__ import annotations

import time

time.sleep(60)
