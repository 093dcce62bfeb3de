"""Print the mutation score per module from mutmut's results (``make mutation``, docs/mutation.md).

mutmut 3 keeps one ``mutants/<module path>.meta`` JSON file per mutated module,
mapping each mutant's name to the exit code of its test run. A mutant is
killed when the tests failed (exit 1 or 3) or ran over their time (a mutant
that makes the code loop is caught too). The survivors judged equivalent
(same behaviour as the original: no test can kill them) are listed, one name
and its reason a line, in tools/mutation_equivalent.txt; the score is the
killed share of the other mutants. A listed name that is no longer a survivor
is reported as stale, so the list cannot quietly rot when the code changes.

Usage: python tools/mutation_score.py [MODULE_PREFIX ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENT_FILE = ROOT / "tools" / "mutation_equivalent.txt"
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


def load_equivalent(path: Path) -> dict[str, str]:
    """``name  reason`` lines (``#`` comments and blank lines skipped)."""
    equivalent: dict[str, str] = {}
    if not path.exists():
        return equivalent
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            equivalent[name] = reason.strip()
    return equivalent


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
    parser.add_argument("--equivalent", type=Path, default=EQUIVALENT_FILE)
    parser.add_argument("--survivors", action="store_true", help="list the survivors not judged equivalent")
    args = parser.parse_args(argv)
    equivalent = load_equivalent(args.equivalent)
    print(f"{'module':<22} {'killed':>6} {'total':>6} {'equiv':>6} {'left':>5} {'no run':>6}  score")
    left_over: list[str] = []
    stale: list[str] = []
    for module, codes in results(args.mutants).items():
        if args.modules and not any(module.startswith(prefix) for prefix in args.modules):
            continue
        status = {name: classify(code) for name, code in codes.items()}
        counts = Counter(status.values())
        if counts["not run"] == len(status):
            continue
        judged = [n for n, s in status.items() if n in equivalent and s in {"survived", "no tests"}]
        stale += [n for n in equivalent if n.startswith(module + ".") and n in status and status[n] == "killed"]
        alive = {"survived", "no tests", "suspicious"}
        survivors = [n for n, s in status.items() if s in alive and n not in equivalent]
        left_over += survivors
        counted = len(status) - counts["not run"] - len(judged)
        score = counts["killed"] / counted if counted else 1.0
        print(
            f"{module:<22} {counts['killed']:>6} {len(status):>6} {len(judged):>6} {len(survivors):>5} "
            f"{counts['not run']:>6}  {score:.1%}"
        )
    if stale:
        print(f"stale entries in {args.equivalent.name} (now killed): {' '.join(stale)}")
    if args.survivors:
        for name in left_over:
            print(f"survivor: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
