# Two entry points for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test test-fast lint bench bench-scale chaos plugin-lock clean

# A .venv is reused only if its python runs and is the version $(PYTHON) is; one made by
# another Python (or whose interpreter is gone) is removed and made again.
MINOR      = import sys; print("%d.%d" % sys.version_info[:2])
PY_MINOR   := $(shell $(PYTHON) -c '$(MINOR)' 2>/dev/null)
VENV_MINOR := $(shell $(BIN)/python -c '$(MINOR)' 2>/dev/null)
ifneq ($(VENV_MINOR),$(PY_MINOR))
.PHONY: $(STAMP)
endif

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: $(PYTHON) is \
	Python $(or $(PY_MINOR),?); aromcp-workflows needs Python 3.11 or newer. Run make PYTHON=python3.11 \
	(or newer)." >&2; exit 1; }
ifneq ($(VENV_MINOR),$(PY_MINOR))
	rm -rf $(VENV)
endif
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

setup: $(STAMP)

DEMO := .demo-project

## run: validate the shipped workflows, then run standards:fix end to end on a demo git
## project with the headless agent (server over stdio, SQLite store in the user data dir)
run: $(STAMP)
	$(BIN)/aromcp-workflows validate --all
	$(BIN)/python examples/demo_project.py $(DEMO)
	$(BIN)/aromcp-workflows --project-dir $(DEMO) run standards:fix --answers examples/answers/standards-fix.yaml

# Every core (pytest-xdist): a worker per core, each module's tests on one worker (a module
# fixture is made once), modules handed out in collection order (the long single-test modules,
# such as the fault campaign, start early instead of last)
XDIST := -n auto --dist loadscope --no-loadscope-reorder

## test: lint and types, then the whole test suite on every core, then the tests that need the
## machine to themselves (the fault campaign) in one process (what CI runs; 11–18 minutes on 2 cores)
test: lint
	$(BIN)/python -m pytest $(XDIST) -m "not alone"
	$(BIN)/python -m pytest -m alone

## test-fast: the edit-loop tier — everything not marked slow (no server subprocesses), on every core, about 1½ minutes on 2 cores
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -x -q $(XDIST)

## lint: ruff and mypy over the package and the tests
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

## bench: the performance budgets of docs/performance.md (prints medians with same-run references)
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_state.py
	$(BIN)/python benchmarks/bench_server.py
	$(BIN)/python benchmarks/bench_store.py
	$(BIN)/python benchmarks/bench_step.py
	$(BIN)/python benchmarks/bench_shell.py
	$(BIN)/python benchmarks/bench_testing.py
	$(BIN)/python benchmarks/bench_otel.py

## bench-scale: many instances and server replicas (minutes; the replicas need PostgreSQL)
bench-scale: $(STAMP)
	$(BIN)/python benchmarks/bench_scale.py
	$(BIN)/python benchmarks/bench_replicas.py --sticky

## chaos: the long fault campaign (about an hour and a half, 2,000 faults; needs PostgreSQL
## and root for the tmpfs and the pid namespaces): docs/reliability.md
chaos: $(STAMP)
	$(BIN)/python benchmarks/chaos.py --seed 100 --rounds 20 --faults 50 --gap 0.2,1.0 --json chaos-report.json

## plugin-lock: make plugin/server/pylock.txt again from pyproject.toml (the exact versions and
## hashes the plugin's launcher installs; needs PyPI): after any change to the dependencies
plugin-lock: $(STAMP)
	$(BIN)/python scripts/plugin_lock.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis $(DEMO)
