"""This process's own HTCondor job ad: the file Condor names in ``_CONDOR_JOB_AD``.

A slave reports its job id in Hello (the overseer tells a job whose slave
never connected from one that serves); a master running as a Condor job
(``submit/master.sub``) publishes its own in the resource file, so that an
overseer and ``mwpy status`` can tell when the master job has left the queue.
The ad is read like any file mwpy does not trust: regular files only, a size
cap, and an odd ad costs only the id (the process works the same).
"""

from __future__ import annotations

import os

from mwpy import safe_files
from mwpy.errors import UnsafeFileError
from mwpy.names import CONDOR_JOB_ID, JOB_AD_VARIABLE

#: A job ad is a few KiB; a bigger file is not read.
JOB_AD_MAX_SIZE = 1 << 20


def own_job_id() -> str:
    """``CLUSTER.PROC`` of the Condor job this process runs as, from its job ad; "" outside Condor."""
    path = os.environ.get(JOB_AD_VARIABLE)
    if not path:
        return ""
    try:
        text = safe_files.read_bytes(path, max_size=JOB_AD_MAX_SIZE).decode("utf-8", "replace")
    except UnsafeFileError:
        return ""
    found: dict[str, str] = {}
    for line in text.splitlines():
        name, equals, value = line.partition("=")
        if equals and name.strip().lower() in ("clusterid", "procid"):
            found[name.strip().lower()] = value.strip()
    job = f"{found.get('clusterid', '')}.{found.get('procid', '')}"
    return job if CONDOR_JOB_ID.fullmatch(job) else ""
