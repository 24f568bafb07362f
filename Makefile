# Two set-up commands on a fresh machine: `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The storage tests start their own throwaway server from these binaries (tests/pg.py).
PG_INITDB := /usr/lib/postgresql/*/bin/initdb
SLURM_CHECK := test -x /usr/sbin/slurmctld -a -x /usr/sbin/slurmd -a -x /usr/bin/sbatch -a -x /usr/sbin/munged
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install run test lint typecheck unit docs-check postgres prometheus chromium slurm service-tools bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,postgres]'
	touch $(STAMP)

install: $(STAMP)

# The main job: train the forecasters if no models exist, then the daemon on SQLite with the
# demo cluster, its first cycle at once, each commit printed as it happens (Ctrl-C stops it),
# on a clock 60 times as fast: jobs finish and new ones start within minutes.
run: $(STAMP)
	$(VENV)/bin/gpuplan -v daemon --print-commits --demo-speed 60

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Two workers, one test file each at a time (a file's fixtures are built once): the suite is
# CPU-bound, and every server a fixture starts takes free loopback ports and its own folder.
unit: $(STAMP) postgres prometheus chromium slurm service-tools
	$(VENV)/bin/pytest -q -n 2 --dist loadfile

# Installs the Debian packages $(1) without starting their system services: policy-rc.d
# answers 101 ("not allowed") for the length of the install.
APT_INSTALL = own_policy=; \
	if [ ! -e /usr/sbin/policy-rc.d ]; then \
		printf '\#!/bin/sh\nexit 101\n' | $(SUDO) tee /usr/sbin/policy-rc.d >/dev/null && \
		$(SUDO) chmod 755 /usr/sbin/policy-rc.d && own_policy=1; \
	fi; \
	status=0; \
	{ $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(1); } \
		|| status=$$?; \
	if [ -n "$$own_policy" ]; then $(SUDO) rm -f /usr/sbin/policy-rc.d; fi; \
	if [ $$status -ne 0 ]; then exit $$status; fi

# Debian's postgresql when its binaries are missing (the storage tests start their own server).
postgres:
	@if ls $(PG_INITDB) >/dev/null 2>&1; then exit 0; fi; \
	echo "make postgres: installing Debian's postgresql (the storage tests start their own server)"; \
	$(call APT_INSTALL,postgresql); \
	ls $(PG_INITDB) >/dev/null

# Debian's chromium when missing: the dashboard's browser tests drive it through Playwright
# (executable_path), which downloads no browser of its own.
chromium:
	@if [ -x /usr/bin/chromium ]; then exit 0; fi; \
	echo "make chromium: installing Debian's chromium (the dashboard's browser tests drive it)"; \
	$(call APT_INSTALL,chromium); \
	test -x /usr/bin/chromium

# Debian's prometheus (2.42, with promtool) when missing (the traffic-source tests start their own).
prometheus:
	@if command -v prometheus >/dev/null && command -v promtool >/dev/null; then exit 0; fi; \
	echo "make prometheus: installing Debian's prometheus (the traffic-source tests start their own server)"; \
	$(call APT_INSTALL,prometheus); \
	command -v prometheus >/dev/null && command -v promtool >/dev/null

# Debian's slurmctld, slurmd, slurm-client and munge when missing (the Slurm tests start their own cluster).
slurm:
	@if $(SLURM_CHECK) >/dev/null 2>&1; then exit 0; fi; \
	echo "make slurm: installing Debian's slurmctld slurmd slurm-client munge (the Slurm tests start their own cluster)"; \
	$(call APT_INSTALL,slurmctld slurmd slurm-client munge); \
	$(SLURM_CHECK)

# Debian's systemd (systemd-analyze, run without systemd running) and logrotate when missing:
# the packaging tests check the shipped unit and logrotate file with them.
service-tools:
	@if command -v systemd-analyze >/dev/null && command -v logrotate >/dev/null; then exit 0; fi; \
	echo "make service-tools: installing Debian's systemd logrotate (the packaging tests check the unit and logrotate file)"; \
	$(call APT_INSTALL,systemd logrotate); \
	command -v systemd-analyze >/dev/null && command -v logrotate >/dev/null

test: lint typecheck unit

# The docs' figures against the commands that print them (`gpuplan train`, the tour's submit),
# and every link of the docs: tests/docs/test_doc_figures.py and tests/docs/test_docs.py, about 10 s.
docs-check: $(STAMP)
	$(VENV)/bin/pytest -q tests/docs/test_doc_figures.py tests/docs/test_docs.py

bench: $(STAMP)
	$(VENV)/bin/gpuplan bench

# The wheel a head node installs into a venv of its own (with the systemd unit, the logrotate
# file and the commented config that `gpuplan init` writes, as package data).
dist: $(STAMP)
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation --no-index -w dist .

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
