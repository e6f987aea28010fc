# posviz developer commands. `make demo` and `make test` create their virtual environments on a
# fresh machine (torch first, then posviz with its dev extras). `make test` runs the whole suite twice:
# in .venv (PYTHON, the newest releases pip resolves, torch 2.13.0) and in .venv-oldest (PYTHON_OLDEST, every
# lower bound of pyproject.toml pinned in .ci/constraints-oldest.txt, torch 2.2.0 among them). Which torch *build*
# pip takes is pip's configuration: PyPI's default (CUDA on Linux, about 3 GB with its libraries) unless pip is
# pointed at a CPU wheel (a --find-links folder, or the PyTorch CPU index as an extra index). posviz runs on both.
PYTHON ?= python3
# The oldest supported Python (3.10, else 3.11: numpy 1.24, the lower bound, has no wheels past 3.11), found on PATH
# or among pyenv's versions by .ci/find-python.
PYTHON_OLDEST ?= $(or $(shell .ci/find-python 3.10),$(shell .ci/find-python 3.11),python3.10)
VENV ?= .venv
VENV_OLDEST ?= .venv-oldest
TORCH ?= 2.13.0
OLDEST := .ci/constraints-oldest.txt
BIN := $(VENV)/bin
STAMP := $(VENV)/.posviz-installed
STAMP_OLDEST := $(VENV_OLDEST)/.posviz-installed
DEMO_MODEL ?= sentence-transformers/all-MiniLM-L6-v2
# Where `make demo` writes (git ignores it): the demo never touches the shipped gallery under reports/, which only
# `make gallery` remakes.
DEMO_OUT ?= demo
export MPLBACKEND ?= Agg

.PHONY: setup setup-oldest demo gallery test test-newest test-oldest fuzz lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==$(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(STAMP_OLDEST): pyproject.toml $(OLDEST)
	@$(PYTHON_OLDEST) -c 'import sys; sys.exit(0 if sys.version_info[:2] in ((3, 10), (3, 11)) else "the oldest environment needs Python 3.10 or 3.11 (numpy 1.24): make test PYTHON_OLDEST=/path/to/python3.10, or make test-newest")'
	$(PYTHON_OLDEST) -m venv $(VENV_OLDEST)
	$(VENV_OLDEST)/bin/python -m pip install --quiet torch -c $(OLDEST)
	$(VENV_OLDEST)/bin/python -m pip install --quiet -e '.[dev]' -c $(OLDEST)
	touch $(STAMP_OLDEST)

setup: $(STAMP)

setup-oldest: $(STAMP_OLDEST)

## demo: the main job on the embedded default model (offline), outputs in demo/ (DEMO_OUT; ignored by git)
demo: export HF_HUB_OFFLINE ?= 1
demo: setup
	SOURCE_DATE_EPOCH=$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || date +%s)} \
		POSVIZ=$(BIN)/posviz PYPDFIUM2=$(BIN)/pypdfium2 DEMO_MODEL=$(DEMO_MODEL) scripts/minilm_demo.sh $(DEMO_OUT)
	cat $(DEMO_OUT)/minilm-toeplitzness.txt
	@echo "the demo's files are in $(DEMO_OUT)/ (the shipped copies under reports/ are made by make gallery)"

## gallery: remake every shipped file under reports/ that the suite's gallery check finds stale (quick ones directly,
## slow ones through their scripts, resuming from runs/gallery/), record them in reports/MANIFEST.json, and rewrite
## the console examples of README.md and docs/ that no longer print what posviz prints
gallery: export HF_HUB_OFFLINE ?= 1
gallery: setup
	$(BIN)/python scripts/gallery.py make
	$(BIN)/python scripts/gallery.py docs --write

## test: the whole test suite on the newest and on the oldest supported transformers/huggingface_hub
test: test-newest test-oldest

# HYPOTHESIS_PROFILE=ci: property tests draw the same examples every run (tests/conftest.py); random test order
# (pytest-randomly) with its seed printed first (-q hides pytest's header): `make test SEED=N` replays an order.
# pytest-xdist: one worker per core, at most 4 (WORKERS= runs the suite in one process)
WORKERS ?= -n auto --maxprocesses 4
ifndef SEED  # drawn once per make run (a `?=` variable would draw anew at every use)
SEED := $(shell $(PYTHON) -c 'import random; print(random.randrange(2**32))')
endif

test-newest: setup
	@echo "newest releases on $$($(BIN)/python -c 'import sys, torch; print("Python", sys.version.split()[0], "torch", torch.__version__)'); random test order, seed $(SEED) (replay: make test SEED=$(SEED))"
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest -q -p randomly --randomly-seed=$(SEED) $(WORKERS)

test-oldest: setup-oldest
	@echo "oldest releases on $$($(VENV_OLDEST)/bin/python -c 'import sys, torch; print("Python", sys.version.split()[0], "torch", torch.__version__)'); random test order, seed $(SEED) (replay: make test SEED=$(SEED))"
	HYPOTHESIS_PROFILE=ci $(VENV_OLDEST)/bin/python -m pytest -q -p randomly --randomly-seed=$(SEED) $(WORKERS)

## fuzz: the property tests only, with new random examples and 10x as many; failures are kept in .hypothesis/fuzz
## and replayed first by the next run (make each one an @example)
fuzz: setup
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q -p no:randomly -m hypothesis tests

lint: setup
	$(BIN)/ruff check posviz tests benchmarks scripts

bench: setup
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) $(VENV_OLDEST) .pytest_cache .ruff_cache .hypothesis
