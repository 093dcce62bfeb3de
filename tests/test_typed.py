"""mwpy is typed for its users: the built wheel ships ``py.typed``, and mypy checks calls through ``submit()``,
a shared object's handle as the object it stands for, and ``initargs`` against the initializer (typeshed's
ProcessPoolExecutor overloads).

The wheel is built from this checkout and installed (``--no-deps``) into a
fresh virtual environment; mypy, from the test environment, analyses a user's
program against that environment (``--python-executable``), so it sees mwpy
exactly as an installed distribution, not as this source tree.
"""

from __future__ import annotations

import subprocess
import textwrap
import venv
import zipfile
from pathlib import Path

from tests.support import PYTHON, ROOT

USER_PROGRAM = """\
    import mwpy


    @mwpy.task
    def double(x: int) -> int:
        return 2 * x


    def label(x: int) -> str:
        return str(x)


    def main(mw: mwpy.Master) -> None:
        ok: int = double.submit(1).result()
        double.submit("one")  # line 15: wrong type through TaskAlgorithm.submit
        with mwpy.Executor(max_workers=1) as ex:
            text: str = ex.submit(label, 2).result()
            ex.submit(label, "two")  # line 18: wrong type through Executor.submit
            wrong: int = ex.submit(label, 3).result()  # line 19: str is not int
            h = ex.share([1, 2, 3])  # the handle types as what it stands for
            total: int = ex.submit(sum, h).result()
        with mwpy.Executor(1, setup, ("one",)):  # line 22: initargs checked against the initializer
            pass
        with mwpy.Executor(initializer=setup, initargs=(1,)):
            pass
        with mwpy.Executor(initializer=setup, initargs=(1, 2)):  # line 26: one too many
            pass


    def setup(n: int) -> None:
        pass
"""


def test_an_installed_mwpy_is_typed_and_submit_keeps_the_signature(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [PYTHON, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = wheels.glob("mwpy-*.whl")
    assert "mwpy/py.typed" in zipfile.ZipFile(wheel).namelist()
    env = tmp_path / "env"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    program = tmp_path / "user" / "program.py"
    program.parent.mkdir()
    program.write_text(textwrap.dedent(USER_PROGRAM))
    checked = subprocess.run(
        [PYTHON, "-m", "mypy", "--strict", "--python-executable", str(python), "--no-incremental", "program.py"],
        cwd=program.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert not any("missing library stubs or py.typed" in line for line in errors), checked.stdout
    assert {line.split(":")[1] for line in errors} == {"15", "18", "19", "22", "26"}, checked.stdout
    assert 'incompatible type "str"; expected "int"' in errors[0]
