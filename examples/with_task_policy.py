"""With task policy: a submitter with a fixed policy, mapped over a list (CL-MW's with-task-policy).

``times10.with_policy(tag="a-times10-task")`` is a plain callable that
submits ``times10`` tasks, each carrying that tag, which comes back unchanged
on every result. Being an ordinary function, it maps over any iterable like
one; it returns the future of each task it submits (``.task_id`` is its id). Any policy field works
the same way (``sid``, ``retry``, ``do_it_anyway``, ``key``).

Run it on local slaves:

    mwpy local examples/with_task_policy.py --slaves 2

Each result line reads ``Got VALUE tagged TAG from SLAVE``; the last one
``with_task_policy: N results, N tagged 'a-times10-task'``.
"""

import mwpy


@mwpy.task
def times10(value: int) -> int:
    return value * 10


TAG = "a-times10-task"


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    times10_task = times10.with_policy(tag=TAG)
    waiting = {future.task_id for future in map(times10_task, range(1, 101))}
    received = tagged = 0
    while waiting:
        mw.loop()
        for result in mw.results():
            waiting.remove(result.task_id)
            received += 1
            tagged += result.tag == TAG
            print(f"Got {result.value!r} tagged {result.tag!r} from {result.slave_id}")
    print(f"with_task_policy: {received} results, {tagged} tagged {TAG!r}")
    return 0 if tagged == received else 1


if __name__ == "__main__":
    mwpy.run()
