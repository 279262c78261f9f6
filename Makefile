# The README's commands. Each target first does what a fresh machine needs: the container
# engine, the virtualenv with an editable install, and the sandbox image.
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test lint engine install image benchmark

test: image
	$(BIN)/pytest

lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

engine:
	bash scripts/engine-bootstrap.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(STAMP)

image: engine install
	$(BIN)/jupyter sandbox build-image

benchmark: image
	$(BIN)/python benchmarks/startup.py --runs 10
