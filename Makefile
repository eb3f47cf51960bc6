# The two commands: `make demo` and `make test`. Each installs what is missing first.
SHELL := /bin/bash
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	if command -v $$p >/dev/null && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then echo $$p; break; fi; done)
VENV := .venv
STAMP := $(VENV)/.installed-stamp
DATA_DIR ?= .magnetar/demo
PYTEST_ARGS ?=
# Tests run in two pytest-xdist workers, a whole file per worker (module fixtures start once): most tests wait
# on processes, sockets and ZooKeeper, so two share a 2-core machine well. TEST_WORKERS=0 runs them in one.
TEST_WORKERS ?= 2

.PHONY: test demo install zookeeper prometheus fuse down proto clean

install: $(STAMP) zookeeper prometheus

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.11+ is required" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

zookeeper:
	@scripts/ensure-zookeeper

prometheus:
	@scripts/ensure-prometheus

fuse:
	@scripts/ensure-fuse

# The suite starts well over a thousand Python processes (bookies, brokers, CLIs): with bytecode caching on
# (an environment may turn it off with PYTHONDONTWRITEBYTECODE), each imports Magnetar's modules without
# compiling them again, ~0.3 s of CPU saved per process start.
test: install fuse
	env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

demo: install
	$(VENV)/bin/magnetar demo --data-dir $(DATA_DIR)

down:
	$(VENV)/bin/magnetar down --data-dir $(DATA_DIR)

proto: install
	$(VENV)/bin/python -m magnetar.proto.generate
	$(VENV)/bin/python -m magnetar.protocol.generate

clean:
	rm -rf $(VENV) .magnetar
