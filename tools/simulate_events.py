#!/usr/bin/env python3
"""Write a plausible event log of a simulated computation, through mwpy's own EventWriter.

Why this exists: the report, the goodput summary and their tests need logs
with churn, failures, timeouts and evictions in them, and big ones (10^6
tasks) to check the report's size and build time; a real run of that size
takes a pool. The simulation drives the real writer with a simulated clock
(seeded, so every run writes the same file), in loop passes as a master
would: slaves join and leave (one times out, one is evicted), tasks of two
algorithms with log-normal run times, a few that raise, the resource file
and Condor's job counts now and then.

    python tools/simulate_events.py events.jsonl --tasks 20000 --slaves 8
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from mwpy.events import CondorJobs, EventWriter, ResourceFileWritten, SlaveConnected, SlaveDisconnected

_TRACEBACK = """Traceback (most recent call last):
  File "/home/user/fit.py", line 41, in fit
    return solve(matrix, rhs)
  File "/home/user/fit.py", line 17, in solve
    raise ValueError(f"singular matrix (pivot {pivot!r})")
ValueError: singular matrix (pivot 0.0)
"""


class _Clock:
    """The simulated wall clock the writer stamps events with."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def simulate(path: Path, tasks: int, slaves: int, seed: int = 12, start: float = 1_767_225_600.0) -> None:
    """Simulate a computation of ``tasks`` tasks on up to ``slaves`` slaves into the log at ``path``."""
    rng = random.Random(seed)
    clock = _Clock(start)
    with EventWriter(path, clock=clock) as writer:
        writer.master_start(member_id="sim-1", host="submit.example.org", total=tasks)
        # per live slave: (busy until, queue of (run, wait) for its current batch)
        live: dict[str, float] = {}
        joined = 0
        numbers = 0
        done = 0
        next_join = start + 1.0
        queued = tasks
        lost_one = False
        timed_out_one = False
        step = 0.25
        while done < tasks:
            clock.now += step
            now = clock.now
            if len(live) < slaves and now >= next_join and queued > 0:
                numbers += 1
                sid = f"slave-{numbers}"
                live[sid] = now
                joined += 1
                writer.emit(
                    SlaveConnected(
                        t=now,
                        slave=sid,
                        host=f"node{numbers:02d}.example.org",
                        address=f"10.0.0.{numbers}:4{numbers:04d}",
                        group="unordered",
                        job=f"1234.{numbers - 1}",
                    )
                )
                next_join = now + rng.expovariate(1 / 4.0)
            for sid in list(live):
                if done >= tasks:
                    break
                if not lost_one and done > tasks * 0.45 and sid == "slave-2":
                    lost_one = True
                    writer.emit(SlaveDisconnected(t=now, slave=sid, cause="eof", reason="EOF (evicted)", in_flight=3))
                    del live[sid]
                    next_join = now + 5.0
                    continue
                if not timed_out_one and done > tasks * 0.7 and sid == "slave-3":
                    timed_out_one = True
                    writer.emit(
                        SlaveDisconnected(
                            t=now, slave=sid, cause="timeout", reason="silent for 60 s (client timeout)", in_flight=1
                        )
                    )
                    del live[sid]
                    next_join = now + 8.0
                    continue
                busy = live[sid]
                budget = now - max(busy, now - step)
                batch = 0
                while budget > 0 and done < tasks:
                    algorithm = "fit" if rng.random() < 0.7 else "score"
                    run = rng.lognormvariate(-3.5 if algorithm == "fit" else -5.0, 0.6)
                    if rng.random() < 0.15:  # the slave waited for work a little
                        budget -= run * 0.5
                    if run > budget and batch:
                        break
                    budget -= run
                    batch += 1
                    wait = rng.uniform(0.0, 0.02)
                    if rng.random() < 0.0004:
                        retried = rng.random() < 0.6
                        writer.task_finished(sid, algorithm, "retried" if retried else "error", run, wait)
                        writer.task_failed(
                            task=done,
                            slave=sid,
                            algorithm=algorithm,
                            error="ValueError",
                            message="singular matrix (pivot 0.0)",
                            traceback=_TRACEBACK,
                            retried=retried,
                            output=f"fitting block {done}\ncondition number 1e17\n",
                        )
                        if retried:
                            continue
                    else:
                        writer.task_finished(sid, algorithm, "ok", run, wait)
                    done += 1
                    queued -= 1
                live[sid] = now + max(0.0, -budget)
                writer.tasks_dispatched(sid, max(batch, 1))
            if int(now / 5) != int((now - step) / 5):
                needed = max(0, min(slaves, queued) - len(live))
                writer.emit(
                    ResourceFileWritten(
                        t=now,
                        slaves_needed=needed,
                        slaves_connected={"ordered": 0, "intermingle": 0, "unordered": len(live)},
                        tasks_done=done,
                        tasks_pending=queued,
                        tasks_running=len(live),
                    )
                )
                writer.emit(CondorJobs(t=now, idle=needed, running=len(live), held=0))
            writer.flush()
        for sid in list(live):
            writer.emit(SlaveDisconnected(t=clock.now, slave=sid, cause="shutdown", reason="finished", in_flight=0))
        writer.emit(
            ResourceFileWritten(
                t=clock.now,
                slaves_needed=0,
                slaves_connected={"ordered": 0, "intermingle": 0, "unordered": 0},
                tasks_done=done,
                tasks_pending=0,
                tasks_running=0,
                finished=True,
            )
        )
        writer.master_stop(status=0, tasks_done=done)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the event log of a simulated computation.")
    parser.add_argument("output")
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--slaves", type=int, default=8)
    parser.add_argument("--seed", type=int, default=12)
    options = parser.parse_args(argv)
    Path(options.output).unlink(missing_ok=True)
    simulate(Path(options.output), options.tasks, options.slaves, options.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
