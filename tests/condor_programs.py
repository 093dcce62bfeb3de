"""Source text of the small mwpy programs the Condor tests submit (written into each test's work folder).

Their tasks wait for a *release file* the test creates, so a test decides
when the work may end, and slaves stay busy (holding a task) until then: no
test has to guess how long anything takes.
"""

from __future__ import annotations

#: ``gated.py RELEASE COUNT``: COUNT tasks, each held until RELEASE exists; prints the squares.
GATED = '''\
"""COUNT tasks that each wait for the release file, then return a square."""
import os
import time

import mwpy


@mwpy.task
def gated(release: str, value: int) -> int:
    while not os.path.exists(release):
        time.sleep(0.1)
    return value * value


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    release, count = argv[0], int(argv[1])
    values = list(mw.map(gated, [release] * count, range(count)))
    print(f"squares {values}")
    return 0


if __name__ == "__main__":
    mwpy.run()
'''

#: ``shrink.py RELEASE SHRINK SLAVES``: wants SLAVES slaves; two held tasks; SHRINK makes it want none more.
SHRINK = '''\
"""Want many slaves, give two of them a held task, then (when SHRINK exists) want no more."""
import os
import time

import mwpy


@mwpy.task
def gated(release: str, value: int) -> int:
    while not os.path.exists(release):
        time.sleep(0.1)
    return value * value


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    release, shrink, slaves = argv[0], argv[1], int(argv[2])
    mw.allocate_slaves(slaves)
    gated.submit(release, 2)
    gated.submit(release, 3)
    while not os.path.exists(shrink):
        mw.loop(timeout=0.2)
    mw.deallocate_slaves(slaves)
    print("shrinking", flush=True)
    values: list[int] = []
    while len(values) < 2:
        mw.loop()
        values += [result.value for result in mw.results()]
    print(f"values {sorted(values)}")
    return 0


if __name__ == "__main__":
    mwpy.run()
'''

#: ``flaky.py``: the first slave to start exits 1 (writing its job id into MARKER); squares 0..29.
FLAKY = '''\
"""The first slave that starts exits 1 at once (it writes its Condor job id into the marker file)."""
import os
import sys

import mwpy

MARKER = {marker!r}

if "--mw-slave" in sys.argv:
    try:
        fd = os.open(MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        pass
    else:
        ad = {{}}
        with open(os.environ["_CONDOR_JOB_AD"]) as lines:
            for line in lines:
                name, _, value = line.partition(" = ")
                ad[name] = value.strip()
        os.write(fd, f"{{ad['ClusterId']}}.{{ad['ProcId']}}".encode())
        os.close(fd)
        sys.exit(1)


@mwpy.task
def square(value: int) -> int:
    return value * value


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    print(f"sum {{sum(mw.map(square, range(30)))}}")
    return 0


if __name__ == "__main__":
    mwpy.run()
'''

#: ``journaled.py RELEASE COUNT``: keyed tasks; those of the second half wait for RELEASE.
JOURNALED = '''\
"""Keyed tasks (journaled); the second half waits for the release file. Prints how many came from the journal."""
import os
import time

import mwpy


@mwpy.task
def gated_square(release: str, gate: int, value: int) -> int:
    if value >= gate:
        while not os.path.exists(release):
            time.sleep(0.1)
    return value * value


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    release, count = argv[0], int(argv[1])
    gate = count // 2
    total = journaled = 0
    results = mw.as_completed(
        gated_square, [release] * count, [gate] * count, range(count), key=lambda r, g, value: f"square-{value}"
    )
    for result in results:
        if not result.ok:
            print(f"failed: {result.error}")
            return 1
        total += result.value
        journaled += result.journaled
    print(f"sum {total}, journaled {journaled} of {count}")
    return 0


if __name__ == "__main__":
    mwpy.run()
'''
