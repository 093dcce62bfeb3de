"""A back-end module whose batch system's bindings are not installed, as ``condor`` is without htcondor2.

Naming it is no typo: ``mwpy overseer`` says it cannot be loaded and exits 1, as for a missing schedd.
"""

from __future__ import annotations

import importlib

bindings = importlib.import_module("mwpy_test_bindings_that_are_not_installed")
