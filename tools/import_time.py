"""What starting mwpy costs: wall time of ``import mwpy.resource_file`` and of a slave start, in two checkouts.

docs/design.md ("Loading only what a process needs") quotes its output. Each
measurement runs the interpreters in turn, ``--runs`` times each (so both
see the same load), and reports the median with min-max in seconds:

* ``python -c pass``: the interpreter alone, for scale;
* ``python -c "import mwpy.resource_file"``: what ``mwpy status``, an
  overseer and every slave pay first;
* a slave start: a program as the README writes it (``@mwpy.task``,
  ``@mwpy.master`` with ``mw: mwpy.Master``) run with ``--mw-slave`` on a
  resource file that says the computation is finished, so it reads the file
  and exits 0 without a master;

and the modules each loads (from ``sys.modules``). Usage::

    python tools/import_time.py [--baseline OTHER_PYTHON] [--runs N]

``python`` is this checkout's interpreter (``.venv/bin/python``); the
baseline's must import its own mwpy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

PROGRAM = textwrap.dedent("""
    import mwpy


    @mwpy.task
    def double(x: int) -> int:
        return 2 * x


    @mwpy.master
    def main(mw: mwpy.Master, argv: list[str]) -> int:
        return 0


    if __name__ == "__main__":
        mwpy.run()
""")
#: A finished computation's resource file: the slave reads it and leaves at once.
RESOURCE_FILE = {
    "computation_status": "finished", "timestamp": 0.0, "update_interval": 1.0, "member_id": "m",
    "master_host": "127.0.0.1", "master_port": 1, "slaves_needed": 0, "slave_executable": "python",
    "slave_files": [], "slave_arguments": [], "master_pid": 1, "format": "mwpy-resource-file", "version": 1,
}  # fmt: skip


def wall(command: list[str], cwd: str) -> float:
    """Seconds ``command`` took, run in ``cwd`` (a folder of no checkout: ``-c`` would import mwpy from it)."""
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True, cwd=cwd)
    return time.perf_counter() - started


def modules(python: str, code: str, cwd: str) -> int:
    probe = f"{code}\nimport sys\nprint(sum(name.startswith('mwpy') for name in sys.modules), len(sys.modules))"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True, cwd=cwd)
    return int(done.stdout.split()[-2])


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}] s"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python tools/import_time.py", description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="another checkout's interpreter, measured in turn with this one")
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    pythons = {"this checkout": sys.executable}
    if args.baseline:
        pythons["baseline"] = args.baseline
    with tempfile.TemporaryDirectory() as folder:
        program = Path(folder) / "program.py"
        program.write_text(PROGRAM)
        resource = Path(folder) / "resource.json"
        resource.write_text(json.dumps(RESOURCE_FILE))
        cases = {
            "python -c pass": ["-c", "pass"],
            "import mwpy.resource_file": ["-c", "import mwpy.resource_file"],
            "a slave start": [str(program), "--mw-slave", "--mw-resource-file", str(resource)],
        }
        for case, arguments in cases.items():
            times: dict[str, list[float]] = {name: [] for name in pythons}
            for _ in range(args.runs):
                for name, python in pythons.items():
                    times[name].append(wall([python, *arguments], folder))
            print(case)
            for name, values in times.items():
                print(f"  {name:14} {spread(values)}")
        for name, python in pythons.items():
            loaded = modules(python, "import mwpy.resource_file", folder)
            print(f"mwpy modules after import mwpy.resource_file, {name}: {loaded}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
