"""Print the mutation score per module from mutmut's results (``make mutation``, docs/mutation.md).

mutmut 3 keeps one ``mutants/<module path>.meta`` JSON file per mutated module,
mapping each mutant's name to the exit code of its test run. A mutant is
killed when the tests failed (exit 1 or 3) or ran over their time (a mutant
that makes the code loop is caught too).

Survivors looked at by hand are listed in tools/mutation_judged.txt, one a
line: ``NAME VERDICT REASON``. VERDICT ``equivalent``: it behaves as the
original, no test can kill it; it is left out of the score. VERDICT
``killed-at-import``: code that runs when the module loads (a validator built
at import), which mutmut's switch cannot reach; tools/mutation_import_time.py
runs the tests with the mutant on from the start and records the outcome in
``mutants/import-time.json``. Such a mutant counts as killed only when that
record says the tests failed; otherwise it is left. The score is killed /
(total - equivalent). A listed name that mutmut now kills is reported as
stale, so the list cannot quietly rot when the code changes.

Usage: python tools/mutation_score.py [MODULE_PREFIX ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JUDGED_FILE = ROOT / "tools" / "mutation_judged.txt"
KILLED = {1, 3}
TIMEOUT = {24, -24, 36, 152, 255}
SURVIVED = {0}
NOT_RUN = {None}
#: exit 5 and 33: no test reaches the mutated function.
NO_TESTS = {5, 33}


def classify(code: int | None) -> str:
    if code in KILLED or code in TIMEOUT:
        return "killed"
    if code in SURVIVED:
        return "survived"
    if code in NO_TESTS:
        return "no tests"
    if code in NOT_RUN:
        return "not run"
    return "suspicious"


VERDICTS = ("equivalent", "killed-at-import")


def load_judged(path: Path) -> dict[str, str]:
    """Mutant name -> verdict, from ``NAME VERDICT REASON`` lines (``#`` comments and blank lines skipped)."""
    judged: dict[str, str] = {}
    if not path.exists():
        return judged
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if line and not line.startswith("#"):
            name, verdict, *_ = [*line.split(maxsplit=2), ""]
            if verdict not in VERDICTS:
                raise SystemExit(f"{path}:{number}: verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
            judged[name] = verdict
    return judged


def import_time_kills(mutants: Path) -> set[str]:
    """Mutants tools/mutation_import_time.py saw killed (the tests failed with the mutant on at import)."""
    record = mutants / "import-time.json"
    if not record.exists():
        return set()
    codes: dict[str, int] = json.loads(record.read_text(encoding="utf-8"))
    return {name for name, code in codes.items() if code != 0}


def results(mutants: Path) -> dict[str, dict[str, int | None]]:
    """Module name -> mutant name -> exit code."""
    by_module: dict[str, dict[str, int | None]] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        module = ".".join(meta.relative_to(mutants).with_suffix("").with_suffix("").parts)
        data = json.loads(meta.read_text(encoding="utf-8"))
        by_module[module] = dict(data.get("exit_code_by_key", {}))
    return by_module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="only modules starting with these names (e.g. mwpy.options)")
    parser.add_argument("--mutants", type=Path, default=ROOT / "mutants")
    parser.add_argument("--judged", type=Path, default=JUDGED_FILE)
    parser.add_argument("--survivors", action="store_true", help="list the survivors not judged equivalent")
    args = parser.parse_args(argv)
    judged = load_judged(args.judged)
    at_import = import_time_kills(args.mutants)
    print(f"{'module':<22} {'killed':>6} {'total':>6} {'equiv':>6} {'left':>5} {'no run':>6}  score")
    left_over: list[str] = []
    stale: list[str] = []
    alive = {"survived", "no tests", "suspicious"}
    for module, codes in results(args.mutants).items():
        if args.modules and not any(module.startswith(prefix) for prefix in args.modules):
            continue
        status = {name: classify(code) for name, code in codes.items()}
        stale += [n for n, s in status.items() if n in judged and s == "killed"]
        for name, state in status.items():
            if state in alive and judged.get(name) == "equivalent":
                status[name] = "equivalent"
            elif state in alive and judged.get(name) == "killed-at-import" and name in at_import:
                status[name] = "killed"
        counts = Counter(status.values())
        ran = len(status) - counts["not run"]
        if not ran:
            continue
        survivors = [n for n, s in status.items() if s in alive]
        left_over += survivors
        counted = ran - counts["equivalent"]
        score = counts["killed"] / counted if counted else 1.0
        print(
            f"{module:<22} {counts['killed']:>6} {ran:>6} {counts['equivalent']:>6} {len(survivors):>5} "
            f"{counts['not run']:>6}  {score:.1%}"
        )
    if stale:
        print(f"stale entries in {args.judged.name} (mutmut kills them now): {' '.join(stale)}")
    if args.survivors:
        for name in left_over:
            print(f"survivor: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
