"""Hello world: ten tasks, each greeting one string (CL-MW's hello-world).

The smallest complete program: a task algorithm (``hello``), a master
algorithm that submits the tasks and drives the loop until every result is
in, and ``mwpy.run()``, which runs this same file as master or as slave. No
slave algorithm is declared, so slaves work until the master tells them to stop.

Run it on local slaves:

    mwpy local examples/hello_world.py --slaves 2
    mwpy local examples/hello_world.py --slaves 2 -- --tasks 100

Each result line reads ``Got result from SLAVE: 'Hello World: Task N'``; the
last one ``hello_world: N greetings``.
"""

import argparse

import mwpy


@mwpy.task
def hello(text: str) -> str:
    return f"Hello World: {text}"


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Greet strings on the slaves.")
    parser.add_argument("--tasks", type=int, default=10, help="how many greetings (default 10)")
    count: int = parser.parse_args(argv).tasks

    for x in range(count):
        hello.submit(f"Task {x}")
    received = 0
    while received < count:
        mw.loop()
        for result in mw.results():
            received += 1
            print(f"Got result from {result.slave_id}: {result.value!r}")
    print(f"hello_world: {received} greetings")
    return 0


if __name__ == "__main__":
    mwpy.run()
