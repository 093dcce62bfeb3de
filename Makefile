# The two commands of the README's quick start, and what CI runs.
#   make demo   run a real computation on local slaves (no Condor needed)
#   make test   lint, type-check, build the documentation site and run the whole test suite (Condor tests included where a pool can run)
#   make docs   build the documentation site (mkdocs.yml) into site/, failing on any broken link or reference
#   make mutation  mutation testing of the core modules (slow, not in CI; docs/mutation.md)

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint docs mutation bench-compare clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,docs]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/mwpy local examples/monte_carlo_pi.py --slaves 2

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# --strict: a broken link, a missing page in the nav or an API name that does not resolve fails the build.
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

test: lint docs
	$(BIN)/python -m pytest

# Modules and settings: [tool.mutmut] in pyproject.toml. One worker: the machine is shared.
# MUTANTS picks mutants by name (fnmatch), e.g. make mutation MUTANTS="'mwpy.options*'"; by default the
# overseer's decisions only (its watcher and main loop need real files and time, minutes per mutant).
# tools/mutation_import_time.py then tries the mutants of import-time code mutmut cannot switch on.
MUTANTS ?= 'mwpy.core.scheduler*' 'mwpy.core.entry*' 'mwpy.core.outcomes*' 'mwpy.wire.protocol*' 'mwpy.wire.codec*' 'mwpy.wire.session*' \
	'mwpy.resource_file*' 'mwpy.options*' \
	'mwpy.overseer.xǁOverseerǁreconcile*' 'mwpy.overseer.xǁOverseerǁ_finish*' 'mwpy.overseer.xǁOverseerǁ_note*' 'mwpy.overseer.x__held_because*'
mutation: $(BIN)/.installed
	$(BIN)/python -c 'import mutmut' 2>/dev/null || $(BIN)/python -m pip install --quiet -e '.[test,mutation]'
	rm -rf mutants
	$(BIN)/mutmut run --max-children 1 $(MUTANTS) > mutation.log 2>&1 || { tail -n 30 mutation.log; exit 1; }
	$(BIN)/python tools/mutation_import_time.py >> mutation.log 2>&1 || echo "an import-time mutant survived: mutation.log"
	$(BIN)/python tools/mutation_score.py

# Same-round A/B of this tree against an earlier commit (BASE, checked out once with its own venv under
# ~/.cache/mwpy-bench-baselines): throughput, latency, master CPU per task and start-up, new / baseline.
BASE ?= HEAD
ROUNDS ?= 7
bench-compare: $(BIN)/.installed
	$(BIN)/python -m benchmarks --baseline $(BASE) --rounds $(ROUNDS) --json bench-compare.json

clean:
	rm -rf $(VENV) site .pytest_cache .mypy_cache .ruff_cache mutants mutation.log
