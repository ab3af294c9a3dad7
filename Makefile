# Two commands for a fresh machine: `make run` and `make test`. Each sets itself up.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
TORCH   := torch==2.13.0

.PHONY: run test bench setup clean graphviz bridge-test bridge-setup ray-test wheel-test docs

LOG     := $(VENV)/setup.log

# pip's chatter goes to $(LOG); it is printed only when a step fails.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "setting up $(VENV) (log: $(LOG))" >&2
	@$(BIN)/pip install -q --upgrade pip >$(LOG) 2>&1 || { cat $(LOG); exit 1; }
	@# A local CPU build of torch: CI must never pull a multi-GB CUDA wheel.
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q $(TORCH) >>$(LOG) 2>&1 || { cat $(LOG); exit 1; }
	@$(BIN)/pip install -q -e '.[dev]' >>$(LOG) 2>&1 || { cat $(LOG); exit 1; }
	@touch $(STAMP)

setup: $(STAMP) graphviz

graphviz:
	@command -v dot >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && apt-get install -y -qq graphviz) >/dev/null 2>&1 || echo "note: could not install graphviz; SVG export will be unavailable"; \
	  else echo "note: Graphviz 'dot' not found (install the 'graphviz' package); SVG export will be unavailable"; fi; }

run: setup
	@$(BIN)/urc tui

test: setup
	@$(BIN)/python -m pytest

bench: setup
	@$(BIN)/urc bench

# The SGLang bridge against the real SGLang 0.5.23, CPU only, in a venv of its own so
# `make test` stays SGLang-free. Every install but the project's is --no-deps: SGLang's
# own requirements (and torchvision's, compressed-tensors') would pull a CUDA torch,
# nvidia-* and triton wheels. tools/sglang-cpu-requirements.txt lists what its cache
# modules need to import; workbench/bridge/import_standins.py stands in for triton and torchvision.
SGL_VENV  := .venv-sglang
SGL_BIN   := $(SGL_VENV)/bin
SGL_STAMP := $(SGL_VENV)/.installed
SGL_LOG   := $(SGL_VENV)/setup.log
SGL_REQS  := tools/sglang-cpu-requirements.txt

$(SGL_STAMP): pyproject.toml $(SGL_REQS)
	@test -x $(SGL_BIN)/python || $(PY) -m venv $(SGL_VENV)
	@echo "setting up $(SGL_VENV) (log: $(SGL_LOG))" >&2
	@$(BIN_SGL_PIP) -q --upgrade pip >$(SGL_LOG) 2>&1 || { cat $(SGL_LOG); exit 1; }
	@$(BIN_SGL_PIP) -q $(TORCH) >>$(SGL_LOG) 2>&1 || { cat $(SGL_LOG); exit 1; }
	@$(BIN_SGL_PIP) -q --no-deps -r $(SGL_REQS) sglang==0.5.23 >>$(SGL_LOG) 2>&1 || { cat $(SGL_LOG); exit 1; }
	@$(BIN_SGL_PIP) -q -e '.[dev]' >>$(SGL_LOG) 2>&1 || { cat $(SGL_LOG); exit 1; }
	@# refuse a venv that something upgraded to another torch or filled with GPU wheels
	@$(SGL_BIN)/python -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') and not torch.version.cuda else 'torch ' + torch.__version__ + ' is not the CPU 2.13.0')"
	@! $(SGL_BIN)/pip list 2>/dev/null | grep -iE '^(nvidia-|triton |cuda-)' || { echo "GPU wheels in $(SGL_VENV)"; exit 1; }
	@touch $(SGL_STAMP)

BIN_SGL_PIP := $(SGL_BIN)/pip install

bridge-setup: $(SGL_STAMP)

# URC_REQUIRE_SGLANG: a bridge test file that would skip (SGLang not importable) fails instead
bridge-test: $(SGL_STAMP)
	@URC_REQUIRE_SGLANG=1 $(SGL_BIN)/python -m pytest -p no:cacheprovider tests/bridge/test_bridge_sglang.py tests/model/test_op_registry.py tests/bridge/test_fuzz_against_sglang.py \
		tests/bridge/test_bridge_storage.py tests/bridge/test_bridge_prefetch.py tests/tiers/test_storage_backends.py \
		tests/bridge/test_bridge_kv_events.py tests/bridge/test_bridge_interrupts.py

# urc fuzz --ray on a small local Ray instance (the optional [ray] extra, added to .venv).
# URC_REQUIRE_RAY: the Ray tests fail instead of skipping when Ray cannot be imported.
RAY_STAMP := $(VENV)/.ray-installed

$(RAY_STAMP): $(STAMP)
	@echo "adding Ray to $(VENV) (log: $(LOG))" >&2
	@$(BIN)/pip install -q -e '.[dev,ray]' >>$(LOG) 2>&1 || { cat $(LOG); exit 1; }
	@touch $(RAY_STAMP)

ray-test: $(RAY_STAMP)
	@URC_REQUIRE_RAY=1 $(BIN)/python -m pytest -p no:cacheprovider tests/fuzz/test_fuzz_ray.py

# urc as a tool: the wheel, installed into a fresh venv outside the checkout, opens the
# bundled scenarios by name and the workbench's first screen (tools/check_wheel_install.sh)
wheel-test: $(STAMP)
	@PY=$(PY) TORCH=$(TORCH) tools/check_wheel_install.sh

# The documentation site (MkDocs, Material theme) into site/: the reference pages are made
# from the registries first (tools/gen_reference.py); any warning (a broken link) fails it.
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	@echo "adding MkDocs to $(VENV) (log: $(LOG))" >&2
	@$(BIN)/python -c "import mkdocs, material" 2>/dev/null || $(BIN)/pip install -q 'mkdocs>=1.6' 'mkdocs-material>=9.5' >>$(LOG) 2>&1 || { cat $(LOG); exit 1; }
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	@$(BIN)/python tools/gen_reference.py
	@NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

clean:
	rm -rf $(VENV) $(SGL_VENV) .pytest_cache .hypothesis site
