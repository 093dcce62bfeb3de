"""Tasks of two needs on a two-node pool, then a master that stays up until a gate file exists.

Master usage (after the ``--mw-*`` options): ``GATE MB`` — three tasks need MB of memory, three need
``MwpyNode == 1`` (tools/condor_pool.py's node attribute); each answers with where it ran: its slave's
Condor job id, and its slot's ``MwpyNode`` and ``Memory`` from the machine ad. The master prints
``big JOB NODE MEMORY`` / ``node1 JOB NODE MEMORY`` lines, then serves until ``GATE`` exists (so a test
can look at the slave jobs' ads while they are connected and idle).
"""

from __future__ import annotations

import sys
from pathlib import Path

import mwpy
from mwpy.job_ad import own_job_id, read_ad
from mwpy.names import MACHINE_AD_VARIABLE

NODE1 = mwpy.Resources(requirements="MwpyNode == 1")


@mwpy.task
def where(_: int) -> str:
    """This slave's job id and its slot's node and memory (MB)."""
    slot = read_ad(MACHINE_AD_VARIABLE)
    return f"{own_job_id()} {slot.get('mwpynode', '-')} {slot.get('memory', '-')}"


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    gate, memory = Path(argv[0]), int(argv[1])
    bigs = [where.with_policy(resources={"memory": memory}).submit(i) for i in range(3)]
    node1s = [where.with_policy(resources=NODE1).submit(i) for i in range(3)]
    lines = [f"big {future.result()}" for future in bigs] + [f"node1 {future.result()}" for future in node1s]
    while not gate.exists():
        mw.loop_once(timeout=0.1)  # keep serving the slaves until the test has looked at their ads
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    mwpy.run()
