"""Run the tests against mutants of code that runs when a module is imported (``make mutation``, docs/mutation.md).

mutmut switches a mutant on inside a test process whose modules were imported
before it, so a mutant in code that runs at import time (the attrs validators
``resource_file._hex`` builds, ``protocol._getter``, ``session._by_state``)
never runs there and survives whatever the tests do. This script starts a
fresh pytest in mutmut's ``mutants/`` copy with ``MUTANT_UNDER_TEST`` set
before anything is imported, so the import itself runs the mutant. A failing
run (a failed test, or an import that no longer works) kills it.

It checks the mutants tools/mutation_judged.txt lists as ``killed-at-import``
(or the names given) and records each outcome in ``mutants/import-time.json``;
tools/mutation_score.py counts such a mutant as killed only when that record
says so, so the verdict is re-checked on every run rather than trusted.

Usage: python tools/mutation_import_time.py [NAME ...]; exit 1 if one survives.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from mutation_score import JUDGED_FILE, load_judged  # noqa: E402 - a sibling script, not a package

RESULTS = "import-time.json"
#: Seconds one test run may take before the mutant counts as killed (it made the code loop).
TIME_LIMIT = 600.0


def test_files() -> list[str]:
    """The tests ``make mutation`` runs, from ``[tool.mutmut]`` in pyproject.toml."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]
    files: list[str] = settings["pytest_add_cli_args_test_selection"]
    return files


def ordered_for(name: str, files: list[str]) -> list[str]:
    """The test files, those named after the mutant's module first (``-x`` then stops early)."""
    parts = name.split(".")
    if len(parts) < 3:
        return files
    return sorted(files, key=lambda path: parts[1] not in Path(path).stem)


def run(name: str, mutants: Path, files: list[str]) -> int:
    """The exit status of the tests with ``name`` switched on from the start (a time-out counts as 24)."""
    env = {**os.environ, "MUTANT_UNDER_TEST": name, "PYTHONPATH": str(mutants)}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not condor"]
    try:
        done = subprocess.run(
            [*command, *ordered_for(name, files)],
            cwd=mutants,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=TIME_LIMIT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return 24
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutant names (default: the killed-at-import entries)")
    parser.add_argument("--mutants", type=Path, default=ROOT / "mutants")
    parser.add_argument("--judged", type=Path, default=JUDGED_FILE)
    args = parser.parse_args(argv)
    mutants = args.mutants.resolve()
    if not (mutants / "mwpy").is_dir():
        raise SystemExit(f"{mutants}: no mutants here; run mutmut first (make mutation)")
    names = args.names or [n for n, verdict in load_judged(args.judged).items() if verdict == "killed-at-import"]
    record_path = mutants / RESULTS
    record: dict[str, int] = json.loads(record_path.read_text(encoding="utf-8")) if record_path.exists() else {}
    files = test_files()
    if names and run("", mutants, files) != 0:  # no mutant: the tests must pass, or every "kill" means nothing
        raise SystemExit("the tests fail in mutants/ without any mutant switched on; fix that first")
    survivors = []
    for name in names:
        code = run(name, mutants, files)
        record[name] = code
        record_path.write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")
        killed = code != 0
        print(f"{'killed' if killed else 'SURVIVED'} (exit {code}): {name}", flush=True)
        if not killed:
            survivors.append(name)
    print(f"{len(names) - len(survivors)} of {len(names)} import-time mutants killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
