# posviz developer commands. `make demo` and `make test` each create .venv on a
# fresh machine (torch 2.13.0 CPU wheel first, then posviz with its dev extras).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.posviz-installed
DEMO_MODEL ?= sentence-transformers/all-MiniLM-L6-v2
export MPLBACKEND ?= Agg

.PHONY: setup demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

## demo: the main job on the embedded default model (offline), outputs in reports/
demo: export HF_HUB_OFFLINE ?= 1
demo: setup
	mkdir -p reports
	$(BIN)/posviz heatmap $(DEMO_MODEL) -o reports/minilm-heatmap.png
	$(BIN)/posviz toeplitzness $(DEMO_MODEL) sinusoidal:512x384 gaussian:512x384:0 -o reports/minilm-toeplitzness.txt
	$(BIN)/posviz toeplitzness $(DEMO_MODEL) --format json -o reports/minilm-toeplitzness.json
	SOURCE_DATE_EPOCH=$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || date +%s)} \
		$(BIN)/posviz report $(DEMO_MODEL) -o reports/minilm-report.pdf
	PYPDFIUM_LOGLEVEL=warning $(BIN)/pypdfium2 render reports/minilm-report.pdf -o reports --prefix minilm-report-page- --scale 1.25 -f png > /dev/null
	$(BIN)/posviz heads $(DEMO_MODEL) --layer 0 --dpi 100 -o reports/minilm-heads-layer0.png -o reports/minilm-heads-layer0.txt
	$(BIN)/posviz heads $(DEMO_MODEL) --layers all -o reports/minilm-heads-all-layers.png -o reports/minilm-heads.json
	cat reports/minilm-toeplitzness.txt

## test: the whole test suite
test: setup
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check posviz tests benchmarks

bench: setup
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
