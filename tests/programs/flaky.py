"""The first slave that starts exits 1 at once; the others square 0..29.

The failing slave writes its Condor job id ("ClusterId.ProcId") into
``first-start-failed`` in the submit folder, so a test can check that Condor
ran that same job again (tests/test_condor_submit_files.py). It finds that
folder through its resource file, whose ``slave_files`` are the master's
absolute paths (the test pool shares the folder with its jobs), not through
the job ad's ``Iwd``: on the execute side that is the job's scratch folder.
Slaves read their job ad from ``$_CONDOR_JOB_AD``: this program runs under Condor only.
"""

from __future__ import annotations

import json
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


def submit_folder() -> str:
    """The folder of the files the master names in the resource file (absolute paths on the submit side)."""
    resource = sys.argv[sys.argv.index("--mw-resource-file") + 1]
    with open(resource, encoding="utf-8") as file:
        files: list[str] = json.load(file)["slave_files"]
    return os.path.dirname(files[0])


def fail_first() -> None:
    """Exit 1 if no slave has failed yet, leaving this job's id in the marker file."""
    ad = job_ad()
    marker = os.path.join(submit_folder(), MARKER)
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
