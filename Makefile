# Two set-up commands on a fresh machine: `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test lint typecheck unit bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,postgres]'
	touch $(STAMP)

install: $(STAMP)

# The main job: train the forecasters if no models exist, then the daemon on SQLite with the
# demo cluster, its first cycle at once, each commit printed as it happens (Ctrl-C stops it).
run: $(STAMP)
	$(VENV)/bin/gpuplan -v daemon --print-commits

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(VENV)/bin/pytest -q

test: lint typecheck unit

bench: $(STAMP)
	$(VENV)/bin/gpuplan bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
