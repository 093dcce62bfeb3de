"""The slave bundle (``mwpy.pyz``) runs a program on a Python that has nothing but its standard library.

docs/condor.md promises that an execute node needs only a Python: the bundle
ships mwpy with attrs and cattrs. So whatever a slave imports (``import mwpy``
included) must not need watchdog, htcondor2, rich, plotly or anything else
that is not in the bundle. ``python -I -S`` is such a node: no site-packages.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support import PROGRAMS, PYTHON, mwpy_command


def test_a_program_runs_from_the_bundle_on_a_bare_python(tmp_path: Path) -> None:
    bundle = tmp_path / "mwpy.pyz"
    built = subprocess.run(
        mwpy_command("bundle", "-o", str(bundle)), capture_output=True, text=True, timeout=120, check=False
    )
    assert built.returncode == 0, built.stderr
    done = subprocess.run(
        [PYTHON, "-I", "-S", str(bundle), str(PROGRAMS / "workload.py"), "--mw-slave", "--mw-help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "--mw-resource-file" in done.stdout
