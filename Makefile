# scrun -- developer and CI entry points. `make test` on a fresh Debian 12 (as root)
# installs everything, brings up the private Slurm cluster + podman, lints, and runs
# the whole test suite. `make help` lists the targets.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

REPO := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
VENV := $(REPO)/.venv
BIN := $(VENV)/bin
# A regular (not editable) install: editable installs add an import hook that costs
# ~10 ms on every scrun call. So the project is reinstalled whenever a source changes.
STAMP := $(VENV)/.installed
SOURCES := pyproject.toml tools/scrun/bin/scrun $(shell find shared tools -name '*.py' -not -path '*/build/*')
# empty = the harness default ($SCRUN_CLUSTER_DIR, else /tmp/scrun-cluster)
CLUSTER_DIR ?=
# lint only the folders that exist (bench/ may be empty or missing)
LINT_DIRS := $(wildcard shared tools tests bench)
SHELL_SCRIPTS := $(wildcard harness/*.sh harness/debian/*.sh bench/*.sh) .ci/run
PYTEST_ARGS ?=
# hard stop for a hung test run (CI must finish well under 30 minutes)
TEST_TIMEOUT ?= 20m
# load the cluster's exports into a recipe line
ENV := eval "$$($(REPO)/harness/env.sh $(CLUSTER_DIR))"
# PLATFORM empty: this machine (Debian 12: Slurm 22.05, podman 4.3). PLATFORM=debian13
# (Slurm 24.11, podman 5.4) or debian14 (Slurm 26.05, podman 5.8): a debootstrapped root of
# that Debian (harness/debian/); cluster-up, cluster-down, demo and bench then run there, on
# its own cluster (other ports; every platform's cluster can run at once).
DEBIAN_PLATFORMS := debian13 debian14
PLATFORM ?=
ifneq ($(filter-out $(DEBIAN_PLATFORMS),$(PLATFORM)),)
$(error PLATFORM=$(PLATFORM): leave it empty (this machine) or use one of: $(DEBIAN_PLATFORMS))
endif
# CMD... in the project's copy inside a platform's root (built or refreshed first)
IN_ROOT = $(REPO)/harness/debian/run.sh $(1)
# a make target inside a platform's root
IN_ROOT_MAKE = $(REPO)/harness/debian/run.sh $(1) make --no-print-directory

.PHONY: help venv deps cluster-up cluster-down docker-up docker-down env lint unit integration \
	test demo bench $(addprefix test-,$(DEBIAN_PLATFORMS)) $(addprefix shell-,$(DEBIAN_PLATFORMS))

help:
	@echo "make deps          install the Debian packages (apt-get, only what is missing)"
	@echo "make venv          .venv with scrun installed (again when a source changed) + test tools"
	@echo "make cluster-up    start the private Slurm cluster + podman setup (idempotent)"
	@echo "make cluster-down  stop the cluster's daemons (and the private dockerd)"
	@echo "make docker-up     start the private containerd + dockerd (the docker tests do it)"
	@echo "make docker-down   stop them"
	@echo "make env           print the exports:  eval \"\$$(make -s env)\""
	@echo "make lint          ruff check, ruff format --check, mypy, shellcheck, lint_tree"
	@echo "make unit          tests not marked integration"
	@echo "make integration   tests marked integration (starts the cluster if needed)"
	@echo "make test          everything above, from nothing (what CI runs)"
	@echo "make demo          a container through the cluster"
	@echo "make bench         bench/run.sh"
	@echo "make test-debian13 make test inside the Debian 13 root (Slurm 24.11, podman 5.4)"
	@echo "make test-debian14 make test inside the Debian 14 root (Slurm 26.05, podman 5.8)"
	@echo "make shell-debian13, shell-debian14  a shell in that root with its cluster's environment"
	@echo "PLATFORM=debian13|debian14  cluster-up, cluster-down, demo, bench on that platform's cluster"

venv: $(STAMP)

$(STAMP): $(SOURCES)
	@test -x $(BIN)/python || /usr/bin/python3 -m venv $(VENV)
	@# compiled: every scrun call would otherwise compile what it imports (a caller's
	@# PYTHONDONTWRITEBYTECODE stops pip from writing the .pyc files)
	PYTHONDONTWRITEBYTECODE= $(BIN)/pip install --quiet --disable-pip-version-check '.[test]'
	@rm -rf build
	@touch $@

deps:
	$(REPO)/harness/install-deps.sh

ifneq ($(PLATFORM),)
cluster-up demo bench:
	$(call IN_ROOT_MAKE,$(PLATFORM)) venv $@

cluster-down:
	$(REPO)/harness/debian/down.sh $(PLATFORM)
else
cluster-up:
	$(REPO)/harness/cluster-up.sh $(CLUSTER_DIR)

# dockerd first: it stops its containers, i.e. their Slurm jobs, while Slurm still runs
cluster-down: docker-down
	$(REPO)/harness/cluster-down.sh $(CLUSTER_DIR)

docker-up: venv
	$(REPO)/harness/docker-up.sh $(CLUSTER_DIR)

docker-down:
	$(REPO)/harness/docker-down.sh $(CLUSTER_DIR)

env:
	@$(REPO)/harness/env.sh $(CLUSTER_DIR)

lint: venv
	$(BIN)/ruff check $(LINT_DIRS)
	$(BIN)/ruff format --check $(LINT_DIRS)
	$(BIN)/mypy shared tools
	$(BIN)/mypy tests
	shellcheck -x $(SHELL_SCRIPTS)
	@# import circles, the hot path's imports, module length (tools/lint-tree)
	PYTHONPATH=$(REPO)/tools/lint-tree $(BIN)/python -m lint_tree

unit: venv
	$(BIN)/pytest -m "not integration" $(PYTEST_ARGS) tests

integration: venv cluster-up
	$(ENV); $(BIN)/pytest -m integration $(PYTEST_ARGS) tests

# One pytest run over the whole suite; its exit code 5 ("no tests collected") fails too.
# Lint failures fail the target, but only after the tests ran (more to read in CI).
# The docker tests stop their dockerd themselves; docker-down.sh once more in case pytest
# was killed (timeout) before its teardown.
test:
	$(MAKE) --no-print-directory deps
	$(MAKE) --no-print-directory venv
	lint_rc=0; $(MAKE) --no-print-directory lint || lint_rc=$$?; \
	$(MAKE) --no-print-directory cluster-up; \
	$(ENV); rc=0; \
	timeout --kill-after=30s $(TEST_TIMEOUT) $(BIN)/pytest $(PYTEST_ARGS) tests || rc=$$?; \
	$(REPO)/harness/docker-down.sh $(CLUSTER_DIR) || { [ $$rc != 0 ] || rc=1; }; \
	if [ $$lint_rc != 0 ]; then echo "make test: lint FAILED" >&2; fi; \
	if [ $$rc != 0 ]; then echo "make test: pytest FAILED (exit $$rc)" >&2; fi; \
	[ $$lint_rc = 0 ] && [ $$rc = 0 ]

# The demo: containers through podman -> scrun -> Slurm on the private cluster.
demo: deps venv cluster-up
	$(ENV); $(REPO)/harness/demo.sh

bench: venv cluster-up
	@if [ -f bench/run.sh ]; then $(ENV); bash bench/run.sh; else echo "no bench/run.sh yet"; fi
	@$(ENV); bash bench/upstream.sh
endif

# The whole of `make test` inside a platform's root (built when missing, ~1 min), on its
# own cluster. Its daemons stay up, like `make test`'s; `make cluster-down PLATFORM=...`.
$(addprefix test-,$(DEBIAN_PLATFORMS)): test-%:
	$(call IN_ROOT_MAKE,$*) test

$(addprefix shell-,$(DEBIAN_PLATFORMS)): shell-%:
	$(call IN_ROOT_MAKE,$*) venv cluster-up >/dev/null
	$(call IN_ROOT,$*) bash -c 'eval "$$(harness/env.sh)" && exec bash -i'
