# ces-eval developer entry points. `make serve` and `make test` work on a fresh machine: `make serve`
# needs only Python (it installs the package into .venv), `make test` installs the whole toolchain.
PYTHON ?= python3
VENV := .venv
CLIENT_VENV := .venv-client
PY := $(VENV)/bin/python
BUF := node_modules/.bin/buf
# Google's published client, the reference for wire facts. It lives in an environment of its own:
# it cannot share a process with our generated modules.
OFFICIAL_CLIENT := google-cloud-ces==0.7.2

.PHONY: setup postgres browser generate check-generated migrations lint format typecheck unit integration test serve bench clean

# The development toolchain: .venv with the dev extras, the official client's .venv-client, and
# node_modules (buf, the Node.js test client): what test, lint, typecheck, unit, integration,
# generate and bench need. serve needs none of it.
setup: $(VENV)/.installed $(CLIENT_VENV)/.installed node_modules/.installed

# Two stamps in one .venv: .installed-runtime (the package and its dependencies, what `make serve`
# needs) and .installed (plus the dev extras). The dev install satisfies both, so `make serve` after
# `make test` installs nothing, and `make test` after `make serve` adds the dev extras.
$(VENV)/.installed-runtime: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e .
	touch $@

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[dev]'
	touch $@ $(VENV)/.installed-runtime

$(CLIENT_VENV)/.installed: Makefile
	$(PYTHON) -m venv $(CLIENT_VENV)
	$(CLIENT_VENV)/bin/python -m pip install --upgrade pip
	$(CLIENT_VENV)/bin/python -m pip install '$(OFFICIAL_CLIENT)'
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# PostgreSQL server binaries: the storage tests start throw-away servers from them. Installs Debian's
# package when run as root and they are missing; otherwise says what to install.
postgres:
	tools/postgres.sh ensure

browser:
	tools/chromium.sh ensure

build/third_party: $(VENV)/.installed
	$(PY) tools/stage_protos.py build/third_party

# generated/ from protos/: `buf generate` (buf.gen.yaml) plus tools/generate.py's own steps (import
# rewriting, descriptor set, official routes, OpenAPI document, MCP tool schemas), then README's
# methods table (tools/readme_methods.py). check-generated regenerates into a temporary folder and
# fails naming every file that differs from the commit (and a stale methods table, a declared table
# without its migrations).
generate: setup
	$(PY) tools/generate.py --client-python $(CLIENT_VENV)/bin/python
	$(PY) tools/readme_methods.py

check-generated: setup
	$(PY) tools/generate.py --check --client-python $(CLIENT_VENV)/bin/python
	$(PY) tools/readme_methods.py --check
	$(PY) tools/migrations.py --check

# The SQLite and PostgreSQL migrations of declared tables that none creates yet (tools/migrations.py,
# ces_eval.storage.schema); committed migrations are never rewritten. tests/contract/test_migrations.py
# fails while one is missing or the migrations and the declarations disagree.
migrations: $(VENV)/.installed
	$(PY) tools/migrations.py

# mypy finds modules by path and does not follow the editable install's import hook, which maps
# ces_eval.generated to generated/ (pyproject.toml): it reads the stubs through this link instead
# (mypy_path). The empty __init__.pyi only makes build/typing/ces_eval a package; mypy takes
# ces_eval itself from src/, the first entry of mypy_path.
build/typing/ces_eval/generated:
	mkdir -p build/typing/ces_eval
	touch build/typing/ces_eval/__init__.pyi
	ln -sfn ../../../generated $@

lint: setup build/third_party
	$(VENV)/bin/ruff check src tests tools bench
	$(VENV)/bin/ruff format --check src tests tools bench
	$(VENV)/bin/lint-imports --no-cache
	$(BUF) lint
	$(BUF) format -d --exit-code protos
	tools/buf_breaking.sh

format: setup
	$(VENV)/bin/ruff format src tests tools bench
	$(VENV)/bin/ruff check --fix src tests tools bench
	$(BUF) format -w protos

typecheck: setup build/typing/ces_eval/generated
	$(VENV)/bin/mypy

# The tests, split by the markers tests/conftest.py gives each one (tests/README.md). unit: the
# tests that need nothing but this process and .venv (no server subprocess, no database server,
# no browser, no other program), in a few minutes. integration: all the others, which start the
# real server, PostgreSQL (postgres), Chromium (browser), the official client (.venv-client, made
# by setup), node with buf's staged imports (build/third_party), ...
unit: setup
	$(VENV)/bin/pytest -m unit

integration: setup build/third_party postgres browser
	$(VENV)/bin/pytest -m "not unit" --durations=20

test: check-generated lint typecheck unit integration

serve: $(VENV)/.installed-runtime
	$(VENV)/bin/ces-eval serve

# Throughput and latency of ces-eval against bare floors on this machine (bench/README.md): loads
# 1,000 and 1,000,000 results (about 10 GB in a temporary folder, removed afterwards), installs
# h2load and wrk when run as root, writes bench/results/latest.{json,md}. Options go in
# BENCH_ARGS, e.g. make bench BENCH_ARGS='--large 100000 --duration 5'.
bench: setup
	bench/tools.sh ensure
	$(PY) -m bench.run $(BENCH_ARGS)

clean:
	rm -rf build $(VENV) $(CLIENT_VENV) node_modules .mypy_cache .ruff_cache .pytest_cache
