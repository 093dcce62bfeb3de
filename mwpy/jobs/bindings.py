"""HTCondor's Python bindings for ``mwpy jobs``, imported so that this process's environment stays the submitter's.

Where no Condor configuration is found, ``import htcondor2`` sets
``CONDOR_CONFIG=/dev/null`` in the environment of the process that imports it.
A job whose submit file says ``getenv = true`` gets the environment
``mwpy jobs`` was started in, as condor_submit gives it the one it ran in:
not mwpy's changes to it (a job that runs Condor's tools would find no
configuration), and not the master's, which inherits the command's. So the
bindings are imported here, once, and the variable they added is taken out
again once they have read their configuration.
"""

from __future__ import annotations

import functools
import os
from typing import Any


@functools.cache
def htcondor() -> Any:
    """The ``htcondor2`` module (untyped bindings), this process's environment as it was before its first import."""
    added = "CONDOR_CONFIG" not in os.environ
    import htcondor2  # noqa: PLC0415 (slow to import; only mwpy jobs and the Condor back end need it)

    if added:
        os.environ.pop("CONDOR_CONFIG", None)
    return htcondor2
