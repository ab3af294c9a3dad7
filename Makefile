# Two commands for a fresh machine: `make run` and `make test`. Each sets itself up.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
TORCH   := torch==2.13.0

.PHONY: run test bench setup clean graphviz

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

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
