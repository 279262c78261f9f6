# The README's commands. Each target first does what a fresh machine needs: the container
# engine, the virtualenv with an editable install, and the sandbox image.
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# JupyterLab refuses to run as root unless told; on a fresh root machine that is who runs it.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
NOTEBOOK_DIR ?= examples

.PHONY: test lab lint engine install image benchmark

test: image
	$(BIN)/pytest

lab: image
	$(BIN)/jupyter lab --ip=127.0.0.1 --no-browser $(ALLOW_ROOT) --ServerApp.root_dir=$(NOTEBOOK_DIR)

lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

engine:
	bash scripts/engine-bootstrap.sh

$(STAMP): pyproject.toml images/python/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]' -c images/python/constraints.txt
	touch $@

install: $(STAMP)

image: engine install
	$(BIN)/jupyter sandbox build-image

benchmark: image
	$(BIN)/python benchmarks/startup.py --runs 10
	$(BIN)/python benchmarks/pool.py --runs 30 --runtime runsc --gap 6
	$(BIN)/python benchmarks/pool.py --runs 30 --runtime runc --gap 4
	$(BIN)/python benchmarks/pool_members.py --members 5 --kernels 7
	$(BIN)/python benchmarks/density.py --runtime runsc --runtime runc
	$(BIN)/python benchmarks/relay.py --runtime runsc
	$(BIN)/python benchmarks/relay.py --runtime runc
	$(BIN)/python benchmarks/snapshots.py --runtime runc --runtime runsc --size 10 --size 200
