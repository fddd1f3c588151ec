# fairseq_qknorm: install, test and run the main job.
#   make demo   - install (if needed), then gl-en from raw text to a BLEU table on CPU
#   make test   - install (if needed), then the test suite
SHELL := /usr/bin/env bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is pinned and installed first: an unpinned torch pulls a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
FAIRSEQ_SPEC ?= ve-fairseq==0.12.3

.PHONY: install test test-fast demo clean-demo bench

install: $(VENV)/.installed

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet "$(FAIRSEQ_SPEC)"
	$(PY) -m pip install --quiet -e ".[spm,tensorboard,test]"
	$(PY) -c "import torch, fairseq, fairseq_qknorm; print('torch', torch.__version__, 'fairseq', fairseq.__version__)"
	touch $@

test: install
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q tests

demo: install
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/demo.sh gl-en

bench: install
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m benchmarks.run
