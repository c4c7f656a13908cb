# nodeforge — two commands: `make setup` once, then `make test` / `make demo`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.nodeforge-setup
PKGS := $(shell sed -e 's/\#.*//' manifests/host-packages.txt | awk 'NF{print $$1}')
PYTEST_ARGS ?=

.PHONY: setup apt venv devcloud-install test test-fast demo demo-down bench clean agent-lock

## setup: install host packages (apt), the project virtualenv and the local cloud's virtualenvs (idempotent)
setup: apt venv devcloud-install

apt:
	@missing=$$(dpkg-query -W -f='$${Package} $${Status}\n' $(PKGS) 2>/dev/null | awk '$$4!="installed"{print $$1}'; \
	  for p in $(PKGS); do dpkg-query -W $$p >/dev/null 2>&1 || echo $$p; done | sort -u); \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing $$missing"; \
	  SUDO=$$( [ $$(id -u) = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else echo "apt: all host packages present"; fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

venv: $(BIN)/python
	@want=$$(cat pyproject.toml | sha256sum | cut -c1-16); \
	if [ "$$(cat $(STAMP) 2>/dev/null)" = "$$want" ]; then echo "venv: up to date"; else \
	  $(BIN)/python -m pip install -q uv==0.13.9 && \
	  VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/uv pip install -q --compile-bytecode -e '.[dev]' && echo $$want > $(STAMP) && echo "venv: installed"; fi

devcloud-install: venv
	$(BIN)/nodeforge devcloud install

## test: the whole suite, slow real-component tests included, on TEST_WORKERS workers (pytest-xdist; each starts
## a local cloud of its own; the two build-and-boot scenarios go first, one per worker; prints the slowest tests)
TEST_WORKERS ?= 2
test: setup
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

## test-fast: unit tests only
test-fast: venv
	$(BIN)/python -m pytest -m "not slow and not devcloud" $(PYTEST_ARGS)

## demo: the main job on the embedded local cloud: the release pipeline for one minor (local fixture
## mirror when the release servers are unreachable), bare-metal batch enrolled, flavors synced, template rendered
demo: setup
	$(BIN)/nodeforge devcloud up
	$(BIN)/nodeforge devcloud check
	$(BIN)/python -m nodeforge.demo
	@echo "local cloud is up: eval \"\$$($(BIN)/nodeforge devcloud env)\" then use $(BIN)/openstack (e.g. '$(BIN)/openstack coe cluster template list'); 'make demo-down' stops it"

demo-down:
	$(BIN)/nodeforge devcloud down

bench: setup
	@for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

## agent-lock: pin the agent ramdisk's ironic-python-agent and every dependency with hashes
## (manifests/agent-ramdisk.in -> agent-ramdisk.lock.txt; the ramdisk's Python: CPython 3.11, x86_64)
agent-lock: venv
	$(BIN)/uv pip compile --quiet --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	  --no-header --annotation-style line manifests/agent-ramdisk.in -o manifests/agent-ramdisk.lock.txt

clean:
	-$(BIN)/nodeforge devcloud down
	rm -rf .devcloud
