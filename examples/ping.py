"""Ping: a stream of tiny tasks kept flowing by the general target number (CL-MW's ping).

The master never holds the whole workload. It keeps about ``--target`` tasks
pending: each time round the loop it asks ``mw.upto_target_number()`` how
many to create, submits that many pings, and drives the loop. Memory stays
bounded however many pings are sent; ``--max-tasks 0`` sends them forever
(stop it with Ctrl-C). Every slave must answer ``"pong"``; anything else,
a task that raised, or a task lost as unrunnable counts as bad.

Run it on local slaves:

    mwpy local examples/ping.py --slaves 2
    mwpy local examples/ping.py --slaves 2 -- --max-tasks 1000000 --target 20000

The last line reads ``ping: N pongs, B bad``.
"""

import argparse
import time

import mwpy


@mwpy.task
def ping(message: str) -> str:
    return "pong" if message == "ping" else f"not a ping: {message!r}"


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Stream ping tasks through the slaves.")
    parser.add_argument("--max-tasks", type=int, default=20_000, help="pings to send; 0 means no end (default 20000)")
    parser.add_argument("--target", type=int, default=10_000, help="pending pings to keep (default 10000)")
    options = parser.parse_args(argv)
    if options.target < 1:
        parser.error("--target must be positive")
    return options


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    options = parse_arguments(argv)
    unbounded = options.max_tasks <= 0
    mw.target_number = options.target
    submitted = pongs = bad = peak = 0
    interrupted = False
    started = time.monotonic()
    try:
        while unbounded or pongs + bad < options.max_tasks:
            # Top the stream up to the target number, never past the bound.
            room = mw.upto_target_number()
            if not unbounded:
                room = min(room, options.max_tasks - submitted)
            for _ in range(room):
                ping.submit("ping")
            submitted += room
            peak = max(peak, mw.pending_tasks())

            mw.loop()
            for task in mw.unrunnable_tasks():
                print(f"Lost ping task {task.task_id} (unrunnable)")
                bad += 1
            for result in mw.results():
                if result.ok and result.value == "pong":
                    pongs += 1
                else:
                    bad += 1
                    print(f"Bad answer from {result.slave_id}: {result.error or result.value!r}")
    except KeyboardInterrupt:  # the way to end an endless stream: report what came back
        interrupted = True
    elapsed = max(time.monotonic() - started, 1e-9)
    answered = pongs + bad
    print(f"{submitted} pings sent, {answered} answered in {elapsed:.2f} s ({answered / elapsed:,.0f} tasks/s)")
    print(f"at most {peak} pings were pending at once (target {options.target})")
    print(f"ping: {pongs} pongs, {bad} bad")
    return 130 if interrupted else 0 if bad == 0 else 1


if __name__ == "__main__":
    mwpy.run()
