"""The first slave that starts exits 1 at once; the others square 0..29.

The failing slave writes its Condor job id ("ClusterId.ProcId") into
``first-start-failed`` in the job's initial folder (the submit folder), so a
test can check that Condor ran that same job again (tests/test_condor_submit_files.py).
Slaves read their job ad from ``$_CONDOR_JOB_AD``: this program runs under Condor only.
"""

from __future__ import annotations

import os
import sys

import mwpy

MARKER = "first-start-failed"


def job_ad() -> dict[str, str]:
    """The job's ClassAd as Condor writes it for the job: ``Name = value`` lines (strings keep their quotes)."""
    ad: dict[str, str] = {}
    with open(os.environ["_CONDOR_JOB_AD"], encoding="utf-8") as lines:
        for line in lines:
            name, _, value = line.partition(" = ")
            ad[name] = value.strip()
    return ad


def fail_first() -> None:
    """Exit 1 if no slave has failed yet, leaving this job's id in the marker file."""
    ad = job_ad()
    marker = os.path.join(ad["Iwd"].strip('"'), MARKER)
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    os.write(fd, f"{ad['ClusterId']}.{ad['ProcId']}".encode())
    os.close(fd)
    sys.exit(1)


if "--mw-slave" in sys.argv:
    fail_first()


@mwpy.task
def square(value: int) -> int:
    return value * value


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    print(f"sum {sum(mw.map(square, range(30)))}")
    return 0


if __name__ == "__main__":
    mwpy.run()
