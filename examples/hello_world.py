"""Hello world: ten tasks, each greeting one string (CL-MW's hello-world).

Run it on local slaves:  mwpy local examples/hello_world.py --slaves 2
"""

import mwpy


@mwpy.task
def hello(text: str) -> str:
    return f"Hello World: {text}"


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    count = int(argv[0]) if argv else 10
    for x in range(count):
        hello.submit(f"Task {x}")
    received = 0
    while received < count:
        mw.loop()
        for result in mw.results():
            received += 1
            print(f"Got result from {result.slave_id}: {result.value!r}")
    return 0


if __name__ == "__main__":
    mwpy.run()
