"""The quick start works: hello world on local slaves."""

from tests.support import EXAMPLES, run_local


def test_hello_world_on_local_slaves_answers_every_task_once() -> None:
    done = run_local(EXAMPLES / "hello_world.py", slaves=2)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "Hello World" in line]
    greetings = sorted(line.split(": ", 1)[1] for line in lines)
    assert greetings == sorted(f"'Hello World: Task {i}'" for i in range(10))
