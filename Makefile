# The README's commands. Each target first does what a fresh machine needs: the container
# engine, the virtualenv with an editable install, and the sandbox image.
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# JupyterLab refuses to run as root unless told; on a fresh root machine that is who runs it.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
NOTEBOOK_DIR ?= examples

.PHONY: test lab lint engine install labextension image browser hub-proxy agents-env benchmark benchmark-gateway fuzz fuzz-api docs docs-env

# TEST_WORKERS: how many pytest-xdist workers share the engine, each given one test file at a
# time, the longest files first (tests/conftest.py, tests/file_durations.json); 0 runs the suite
# in one process. The tests marked `alone` (pyproject.toml) run after them, one at a time.
TEST_WORKERS ?= 3

# JUNIT=PREFIX: each part writes its JUnit XML, PREFIX-parallel.xml and PREFIX-alone.xml
# (scripts/security_report.py --from-junit renders docs/security.md from them).
JUNIT ?=

test: image browser labextension hub-proxy agents-env docs-env
	$(BIN)/pytest -m 'not alone' $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(if $(JUNIT),--junitxml=$(JUNIT)-parallel.xml)
	$(BIN)/pytest -m alone $(if $(JUNIT),--junitxml=$(JUNIT)-alone.xml)

lab: image labextension
	$(BIN)/jupyter lab --ip=127.0.0.1 --no-browser $(ALLOW_ROOT) --ServerApp.root_dir=$(NOTEBOOK_DIR)

lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	cd labextension && npx --no-install prettier --check src test style schema

engine:
	bash scripts/engine-bootstrap.sh

$(STAMP): pyproject.toml images/python/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]' -c images/python/constraints.txt
	touch $@

install: $(STAMP)

# The install builds the JupyterLab extension; this rebuilds it (about 10 s) when its sources
# changed since, so that the tests and `make lab` load what the sources say. The editable
# install copied the build into the virtualenv, where Lab looks first: a rebuild links that
# place to the build instead (as `jupyter labextension develop` does).
LABEXT_IN_VENV := $(VENV)/share/jupyter/labextensions/jupyter-sandbox
LABEXT_SOURCES := $(wildcard labextension/src/*.ts labextension/style/* labextension/schema/*) labextension/package.json
LABEXT_BUILT := jupyter_sandbox/labextension/package.json

$(LABEXT_BUILT): $(STAMP) $(LABEXT_SOURCES)
	cd labextension && npm install && PATH="$(CURDIR)/$(BIN):$$PATH" npm run --silent build:prod >build.log 2>&1 || { cat build.log; exit 1; }
	rm -rf $(LABEXT_IN_VENV) && ln -s $(CURDIR)/jupyter_sandbox/labextension $(LABEXT_IN_VENV)
	touch $@

labextension: $(LABEXT_BUILT)

# Debian's Chromium for the JupyterLab extension's browser tests (Playwright drives it; no
# browser download). Installs only when missing; needs root, as the engine's bootstrap does.
browser:
	bash scripts/browser-bootstrap.sh

# The proxy a JupyterHub puts in front of its single-user servers, for the hub's test
# (tests/hub/): from npm, at a fixed version, into the virtualenv (npm's "global" layout under
# its prefix: .venv/bin/configurable-http-proxy and .venv/lib/node_modules), so that nothing is
# installed outside the project. About 3 s; once per version.
HUB_PROXY_VERSION := 5.3.0
HUB_PROXY := $(VENV)/.hub-proxy-$(HUB_PROXY_VERSION)

$(HUB_PROXY): | $(STAMP)
	npm install --global --prefix $(VENV) --no-audit --no-fund --loglevel=error configurable-http-proxy@$(HUB_PROXY_VERSION)
	touch $@

hub-proxy: $(HUB_PROXY)

# The OpenAI Agents SDK with its E2B extra, unmodified from PyPI, for tests/e2b_api's scenario
# (tests/e2b_api/agents_scenario.py runs in it as a subprocess): its own virtualenv, because
# openai-agents[e2b] pins older e2b packages than the e2b-code-interpreter that .venv has.
AGENTS_VENV    := .venv-agents
AGENTS_VERSION := 0.24
AGENTS_STAMP   := $(AGENTS_VENV)/.installed-$(AGENTS_VERSION)

$(AGENTS_STAMP):
	rm -rf $(AGENTS_VENV)
	$(PYTHON) -m venv $(AGENTS_VENV)
	$(AGENTS_VENV)/bin/pip install --quiet 'openai-agents[e2b]~=$(AGENTS_VERSION).0'
	touch $@

agents-env: $(AGENTS_STAMP)

# Long coverage-guided runs of every fuzz target (fuzz/README.md); the inputs that reach new code
# are copied into fuzz/corpus/ (commit them). `make test` runs each for 6 s only.
FUZZ_SECONDS ?= 300
FUZZ_TARGETS ?=
fuzz: install
	$(BIN)/python fuzz/run.py --seconds $(FUZZ_SECONDS) --grow $(FUZZ_TARGETS)

image: engine install
	$(BIN)/jupyter sandbox build-image

benchmark: image
	$(BIN)/python benchmarks/startup.py --runs 10
	$(BIN)/python benchmarks/restart.py --runs 10
	$(BIN)/python benchmarks/pool.py --runs 30 --runtime runsc --gap 6
	$(BIN)/python benchmarks/pool.py --runs 30 --runtime runc --gap 4
	$(BIN)/python benchmarks/pool_members.py --members 5 --kernels 7
	$(BIN)/python benchmarks/density.py --runtime runsc --runtime runc
	$(BIN)/python benchmarks/relay.py --runtime runsc
	$(BIN)/python benchmarks/relay.py --runtime runc
	$(BIN)/python benchmarks/snapshots.py --runtime runc --runtime runsc --size 10 --size 200
	$(BIN)/python benchmarks/files.py --runtime runc --runtime runsc --size 50 --runs 10
	$(BIN)/python benchmarks/exec.py --runtime runc --runtime runsc --runs 30
	$(BIN)/python benchmarks/removal.py --runtime runsc --runs 4
	$(BIN)/python benchmarks/fairness.py --runtime runc --runtime runsc --runs 3

# Jupyter Kernel Gateway as it ships, for benchmarks/gateway_floor.py: installed beside .venv,
# not into it (nothing of the project uses it; .venv has all it needs, hence --no-deps).
KERNEL_GATEWAY_DIR     := .bench-kernel-gateway
KERNEL_GATEWAY_VERSION := 3.0.1
KERNEL_GATEWAY_STAMP   := $(KERNEL_GATEWAY_DIR)/.installed-$(KERNEL_GATEWAY_VERSION)

$(KERNEL_GATEWAY_STAMP): $(STAMP)
	rm -rf $(KERNEL_GATEWAY_DIR)
	$(BIN)/pip install --quiet --no-deps --target $(KERNEL_GATEWAY_DIR) \
		'jupyter_kernel_gateway==$(KERNEL_GATEWAY_VERSION)'
	touch $@

# Issue 33's figures: kernel start and execute through the sandbox gateway, and the floor of a
# gateway hop with no sandbox (docs/explanation/performance.md).
benchmark-gateway: image hub-proxy $(KERNEL_GATEWAY_STAMP)
	$(BIN)/python benchmarks/gateway.py --runtime runc --runtime runsc --starts 10 --executes 1000
	$(BIN)/python benchmarks/gateway_floor.py --executes 1000 \
		--kernel-gateway-path $(KERNEL_GATEWAY_DIR)

# The REST API fuzzed longer than `make test` does (75 s): schemathesis against
# a real server (tests/server_extension/test_api_fuzz.py) for FUZZ_API_SECONDS;
# FUZZ_API_SEED=N tries other requests. Its log and JUnit report stay in pytest's tmp_path.
FUZZ_API_SECONDS ?= 900
FUZZ_API_SEED ?= 31

fuzz-api: image
	JUPYTER_SANDBOX_FUZZ_SECONDS=$(FUZZ_API_SECONDS) JUPYTER_SANDBOX_FUZZ_SEED=$(FUZZ_API_SEED) $(BIN)/pytest tests/server_extension/test_api_fuzz.py

# The documentation site (docs/: Sphinx, MyST, pydata-sphinx-theme) into docs/_build/html, with
# warnings as errors and nitpicky cross-references. It has its own virtualenv: the package's
# dependencies (read from pyproject.toml; tomllib needs Python 3.11) and docs/requirements.txt.
# The references are generated from this checkout's code, imported rather than installed, so
# the site needs neither Docker nor the JupyterLab extension's build. -E: the references depend
# on code that Sphinx does not track, so every build reads every page afresh.
DOCS_VENV  := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed

$(DOCS_STAMP): pyproject.toml docs/requirements.txt images/python/constraints.txt
	$(PYTHON) -m venv $(DOCS_VENV)
	$(PYTHON) -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"]))' >$(DOCS_VENV)/package-requirements.txt
	$(DOCS_VENV)/bin/pip install --quiet -r docs/requirements.txt -r $(DOCS_VENV)/package-requirements.txt -c images/python/constraints.txt
	touch $@

# tests/docs/test_site.py builds the site with it, so make test makes it too.
docs-env: $(DOCS_STAMP)

docs: docs-env
	$(DOCS_VENV)/bin/sphinx-build -E -W --keep-going -n -q -b html docs docs/_build/html
