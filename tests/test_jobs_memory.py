"""The jobs master's memory does not grow with the number of queued jobs (issue 10: 100,000 jobs).

The master makes a task of a job only when a slave can take it, keeps at most
``--max-pending`` of them, and unpublishes inputs once no job in flight reads
them. Here the master's own pipeline (expanding a job, publishing its inputs,
forgetting it when its result is in) runs over 3,000 and then 9,000 jobs with
a window of 500 in flight: what it holds at the end must be the same.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc
from collections import deque
from pathlib import Path

from mwpy.data.server import FileServer
from mwpy.jobs import program
from mwpy.jobs.description import SubmitDescription


def _held(folder: Path, count: int) -> int:
    (folder / "jobs.sub").write_text(
        "executable = job.sh\narguments = $(Process)\ninput = in.$(Process)\n"
        "transfer_input_files = shared.db\noutput = out.$(Process)\n"
        f"queue {count}\n"
    )
    description = SubmitDescription(folder / "jobs.sub", base=str(folder))
    server = FileServer(b"k" * 32, "memory-test")
    limits = argparse.Namespace(max_output_bytes=1 << 30, max_output_files=100)
    in_flight: deque[str] = deque()
    tracemalloc.start()
    try:
        for spec in description.jobs():
            in_flight.append(program.prepare(spec, server, limits).token)
            if len(in_flight) > 500:
                server.forget(in_flight.popleft())
        gc.collect()
        return tracemalloc.get_traced_memory()[0]  # what is held (a peak also counts 1 MiB read buffers)
    finally:
        tracemalloc.stop()
        server.close()


def test_the_master_s_memory_stays_flat_as_the_queue_grows(tmp_path: Path) -> None:
    (tmp_path / "job.sh").write_text("#!/bin/sh\n")
    (tmp_path / "shared.db").write_bytes(b"shared" * 1000)
    for process in range(9_000):  # a private input per job: unpublished once its job is over
        (tmp_path / f"in.{process}").write_text(str(process))
    small, large = _held(tmp_path, 3_000), _held(tmp_path, 9_000)
    assert large < small + 256 * 1024, (small, large)
