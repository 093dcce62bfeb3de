"""This process's own HTCondor ads: the files Condor names in ``_CONDOR_JOB_AD`` and ``_CONDOR_MACHINE_AD``.

A slave reports its job id in Hello (the overseer tells a job whose slave
never connected from one that serves); a master running as a Condor job
(``submit/master.sub``) publishes its own in the resource file, so that an
overseer and ``mwpy status`` can tell when the master job has left the queue.
A slave also learns from its ads when its slot ends (mwpy/lifetime.py).
An ad is read like any file mwpy does not trust: regular files only, a size
cap, and an odd ad costs only what it would have told (the process works the same).
"""

from __future__ import annotations

import os

from mwpy import safe_files
from mwpy.errors import UnsafeFileError
from mwpy.names import CONDOR_JOB_ID, JOB_AD_VARIABLE, MACHINE_AD_VARIABLE

#: A job ad is a few KiB; a bigger file is not read.
JOB_AD_MAX_SIZE = 1 << 20
#: A slot's machine ad is a few KiB too; one bigger than this is not sent to the master (the slave then
#: matches as one without an ad: mwpy/matching.py).
MACHINE_AD_MAX_SIZE = 256 << 10


def read_ad(variable: str = JOB_AD_VARIABLE) -> dict[str, str]:
    """The ad in the file the environment variable ``variable`` names: attribute (lower case) -> its raw
    ClassAd text (strings keep their quotes); empty outside Condor or for a file that cannot be read."""
    ad: dict[str, str] = {}
    for line in _ad_text(variable, JOB_AD_MAX_SIZE).splitlines():
        name, equals, value = line.partition("=")
        if equals:
            ad[name.strip().lower()] = value.strip()
    return ad


def machine_ad_text() -> str:
    """This slot's machine ad as the ClassAd text Condor wrote (for the master to evaluate task requirements
    against); "" outside Condor, or for a file that cannot be read or is too big."""
    return _ad_text(MACHINE_AD_VARIABLE, MACHINE_AD_MAX_SIZE)


def _ad_text(variable: str, max_size: int) -> str:
    """The text of the ad file the environment variable ``variable`` names; "" without one, or for a file
    that cannot be read or is bigger than ``max_size`` bytes."""
    path = os.environ.get(variable)
    if not path:
        return ""
    try:
        return safe_files.read_bytes(path, max_size=max_size).decode("utf-8", "replace")
    except UnsafeFileError:
        return ""


def ad_string(text: str | None) -> str:
    """A ClassAd string literal of a raw ad line without its quotes and escapes ("" for anything else)."""
    text = text or ""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return ""
    return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")


def own_job_id() -> str:
    """``CLUSTER.PROC`` of the Condor job this process runs as, from its job ad; "" outside Condor."""
    ad = read_ad()
    job = f"{ad.get('clusterid', '')}.{ad.get('procid', '')}"
    return job if CONDOR_JOB_ID.fullmatch(job) else ""


def submit_side_path(name: str) -> str | None:
    """Where the file this job was given as ``name`` (a basename) lives on the submit machine: its entry in
    the job's ``TransferInput``, under the job's submit-side ``Iwd`` (``OrigIwd``: the starter's copy of the
    ad names the scratch folder ``Iwd``) unless absolute. None outside Condor or when no such file was
    transferred. A slave that outlives its master reads the restarted master's resource file
    there, its own copy being the old master's (mwpy/slaveside/startup.py)."""
    ad = read_ad()
    iwd = ad_string(ad.get("origiwd")) or ad_string(ad.get("iwd"))
    for entry in (item.strip() for item in ad_string(ad.get("transferinput")).split(",")):
        if entry and os.path.basename(entry) == name:
            return entry if os.path.isabs(entry) or not iwd else os.path.join(iwd, entry)
    return None
