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

from mwpy.observe.events import CondorJobs, EventWriter, ResourceFileWritten, SlaveConnected, SlaveDisconnected

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


class _Simulation:
    """The simulated master's state between loop passes, and what one pass does."""

    #: Simulated seconds per loop pass.
    STEP = 0.25

    def __init__(self, writer: EventWriter, clock: _Clock, tasks: int, slaves: int, rng: random.Random) -> None:
        self.writer, self.clock, self.rng = writer, clock, rng
        self.tasks, self.slaves = tasks, slaves
        #: Per live slave: the simulated time until which it is busy.
        self.live: dict[str, float] = {}
        self.numbers = 0
        self.done = 0
        self.next_join = clock.now + 1.0
        self.queued = tasks
        self.lost_one = False
        self.timed_out_one = False

    def run(self) -> None:
        self.writer.master_start(member_id="sim-1", host="submit.example.org", total=self.tasks)
        while self.done < self.tasks:
            self.clock.now += self.STEP
            self.loop_pass(self.clock.now)
            self.writer.flush()
        self.finish()

    def loop_pass(self, now: float) -> None:
        if len(self.live) < self.slaves and now >= self.next_join and self.queued > 0:
            self.join(now)
        for sid in list(self.live):
            if self.done >= self.tasks:
                break
            if self.leave(sid, now):
                continue
            self.serve(sid, now)
        if int(now / 5) != int((now - self.STEP) / 5):
            self.resource_file(now)

    def join(self, now: float) -> None:
        self.numbers += 1
        numbers = self.numbers
        sid = f"slave-{numbers}"
        self.live[sid] = now
        self.writer.emit(
            SlaveConnected(
                t=now,
                slave=sid,
                host=f"node{numbers:02d}.example.org",
                address=f"10.0.0.{numbers}:4{numbers:04d}",
                group="unordered",
                job=f"1234.{numbers - 1}",
            )
        )
        self.next_join = now + self.rng.expovariate(1 / 4.0)

    def leave(self, sid: str, now: float) -> bool:
        """The two scripted departures: slave-2 is evicted at 45 % done, slave-3 times out at 70 %."""
        if not self.lost_one and self.done > self.tasks * 0.45 and sid == "slave-2":
            self.lost_one = True
            self.writer.emit(SlaveDisconnected(t=now, slave=sid, cause="eof", reason="EOF (evicted)", in_flight=3))
            self.next_join = now + 5.0
        elif not self.timed_out_one and self.done > self.tasks * 0.7 and sid == "slave-3":
            self.timed_out_one = True
            self.writer.emit(
                SlaveDisconnected(
                    t=now, slave=sid, cause="timeout", reason="silent for 60 s (client timeout)", in_flight=1
                )
            )
            self.next_join = now + 8.0
        else:
            return False
        del self.live[sid]
        return True

    def serve(self, sid: str, now: float) -> None:
        """One batch of tasks run by ``sid`` in this pass, as much as fits in the time it was not busy."""
        rng = self.rng
        busy = self.live[sid]
        budget = now - max(busy, now - self.STEP)
        batch = 0
        while budget > 0 and self.done < self.tasks:
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
                if self.fail(sid, algorithm, run, wait):
                    continue
            else:
                self.writer.task_finished(sid, algorithm, "ok", run, wait)
            self.done += 1
            self.queued -= 1
        self.live[sid] = now + max(0.0, -budget)
        self.writer.tasks_dispatched(sid, max(batch, 1))

    def fail(self, sid: str, algorithm: str, run: float, wait: float) -> bool:
        """A task run that raised; True when it is retried (it is not done)."""
        retried = self.rng.random() < 0.6
        self.writer.task_finished(sid, algorithm, "retried" if retried else "error", run, wait)
        self.writer.task_failed(
            task=self.done,
            slave=sid,
            algorithm=algorithm,
            error="ValueError",
            message="singular matrix (pivot 0.0)",
            traceback=_TRACEBACK,
            retried=retried,
            output=f"fitting block {self.done}\ncondition number 1e17\n",
        )
        return retried

    def resource_file(self, now: float) -> None:
        live = len(self.live)
        needed = max(0, min(self.slaves, self.queued) - live)
        self.writer.emit(
            ResourceFileWritten(
                t=now,
                slaves_needed=needed,
                slaves_connected={"ordered": 0, "intermingle": 0, "unordered": live},
                tasks_done=self.done,
                tasks_pending=self.queued,
                tasks_running=live,
            )
        )
        self.writer.emit(CondorJobs(t=now, idle=needed, running=live, held=0))

    def finish(self) -> None:
        writer, now = self.writer, self.clock.now
        for sid in list(self.live):
            writer.emit(SlaveDisconnected(t=now, slave=sid, cause="shutdown", reason="finished", in_flight=0))
        writer.emit(
            ResourceFileWritten(
                t=now,
                slaves_needed=0,
                slaves_connected={"ordered": 0, "intermingle": 0, "unordered": 0},
                tasks_done=self.done,
                tasks_pending=0,
                tasks_running=0,
                finished=True,
            )
        )
        writer.master_stop(status=0, tasks_done=self.done)


def simulate(path: Path, tasks: int, slaves: int, seed: int = 12, start: float = 1_767_225_600.0) -> None:
    """Simulate a computation of ``tasks`` tasks on up to ``slaves`` slaves into the log at ``path``."""
    clock = _Clock(start)
    with EventWriter(path, clock=clock) as writer:
        _Simulation(writer, clock, tasks, slaves, random.Random(seed)).run()


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
