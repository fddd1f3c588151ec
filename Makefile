# fairseq_qknorm: install, test and run the main job.
#   make demo   - install (if needed), then gl-en from raw text to a BLEU table on CPU
#   make test   - install (if needed), then the test suite (TESTS="-m 'not slow'": the quick loop)
#   make lint   - install (if needed), then ruff (lint + format check, configured in pyproject.toml)
#   make report - install (if needed), then one interactive HTML page per results/<profile>/<pair>/
SHELL := /usr/bin/env bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is pinned and installed first: an unpinned torch pulls a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
FAIRSEQ_SPEC ?= ve-fairseq==0.12.3

.PHONY: install test lint demo grid ablation lr-sweep bench report

install: $(VENV)/.installed

$(VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet "$(FAIRSEQ_SPEC)"
	$(PY) -m pip install --quiet -e ".[spm,tensorboard,test,report]"
	$(PY) -c "import logging; logging.disable(logging.INFO); import torch, fairseq, fairseq_qknorm, qknorm_model_tools; print('torch', torch.__version__, 'fairseq', fairseq.__version__)"  # without fairseq's import-time INFO (tensorboardX)
	touch $@

TESTS ?=
# the suite's processes (pytest-xdist; tests of one file stay in one process, sharing its
# fixtures): 2 for the 2 cores of the CI machine; TEST_WORKERS=0 runs it in this process
TEST_WORKERS ?= 2
test: install
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q --durations=15 -n $(TEST_WORKERS) --dist loadfile $(TESTS) tests

LINT_PATHS ?= .
lint: install
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m ruff format --check $(LINT_PATHS)

demo: install
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/demo.sh gl-en

# the papers' tables: make grid PROFILE=paper PAIRS=all SYSTEMS=all SEEDS=1,2,3, on this machine
# (JOBS=N cells at once, one GPU each) or on Slurm (LAUNCHER=slurm); LAUNCH_ARGS: more launcher
# options (e.g. "--partition gpu --nproc 2"); TRAIN_ARGS: fairseq-train flags for every cell
# (e.g. --fp16). docs/cluster.md.
PROFILE ?= cpu-proxy
PAIRS ?= gl-en
SYSTEMS ?= all
SEEDS ?= 1
PAIR ?= gl-en
LAUNCHER ?= local
JOBS ?=
LAUNCH_ARGS ?=
TRAIN_ARGS ?=
LAUNCH_FLAGS = --launcher "$(LAUNCHER)" $(LAUNCH_ARGS) $(if $(TRAIN_ARGS),-- $(TRAIN_ARGS))
grid: install
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/reproduce.sh --pairs "$(PAIRS)" \
	    --systems "$(SYSTEMS)" --seeds "$(SEEDS)" --profile "$(PROFILE)" \
	    $(if $(JOBS),--jobs "$(JOBS)") $(LAUNCH_FLAGS)

# the 2x2 confound ablation: make ablation PAIR=gl-en SEEDS=1,2 (about an hour on 2 cores with
# the cpu-proxy-fast profile, two runs at a time); on one GPU: make ablation PROFILE=paper ABLATION_JOBS=1
ABLATION_PROFILE ?= $(if $(filter command line,$(origin PROFILE)),$(PROFILE),cpu-proxy-fast)
ABLATION_JOBS ?= 2
comma := ,
# seeds: SEEDS when given on the command line, else 1,2 (the grid's default of one seed is too few)
ABLATION_SEEDS = $(if $(filter command line environment,$(origin SEEDS)),$(SEEDS),1$(comma)2)
ablation: install
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/ablation.sh "$(PAIR)" --seeds "$(ABLATION_SEEDS)" \
	    --profile "$(ABLATION_PROFILE)" --jobs "$(ABLATION_JOBS)" $(LAUNCH_FLAGS)

# the LR sweep (issue 12): make lr-sweep PAIR=gl-en: 4 systems x 6 learning rates x 2 seeds on the
# CPU proxy, about 2 hours on 2 cores two runs at a time (scripts/lr_sweep.sh for the defaults);
# other choices: make lr-sweep LR_SWEEP_ARGS="--lrs 1e-3,1e-2 --systems twt,qk_layernorm"
LR_SWEEP_JOBS ?= 2
LR_SWEEP_ARGS ?=
lr-sweep: install
	PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/lr_sweep.sh "$(PAIR)" --jobs "$(LR_SWEEP_JOBS)" \
	    $(LR_SWEEP_ARGS)

# the interactive report (docs/report.md): DIR/report.html for every results/<profile>/<pair>/
# with something to show, a line naming each one skipped and why (qknorm_tools.report --all;
# or REPORT_DIRS="results/cpu-proxy/gl-en ..."); an attention.json in a DIR adds the viewer
REPORT_DIRS ?=
report: install
	$(PY) -m qknorm_tools.report $(or $(REPORT_DIRS),--all results)

bench: install
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m benchmarks.run
