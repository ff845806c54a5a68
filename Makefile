# Two commands on a fresh machine: `make demo` and `make test`.
#
# The virtual environment lives outside the checkout, keyed by a hash of the
# dependency pins in setup.cfg, and `.venv` is a link to it. A fresh clone
# (CI) with unchanged pins reuses the environment in seconds; a pin change
# builds a new one. Override the location with ENV_HOME=/some/dir.
SHELL := /bin/bash
PYTHON ?= python3
# Supported interpreters: CPython 3.11.2 (Debian 12's own) up to 3.11.x, as setup.cfg's
# python_requires says; torch 2.14.1 and torchvision 0.29.1 are pinned for 3.11.
PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)
ifeq ($(filter 3.11.%,$(PYTHON_VERSION)),)
$(error PYTHON=$(PYTHON) is $(or $(PYTHON_VERSION),not a working Python); expected Python 3.11.2 or a later 3.11.x (pass PYTHON=/path/to/python3.11))
endif
ifneq ($(filter 3.11.0 3.11.1,$(PYTHON_VERSION)),)
$(error PYTHON=$(PYTHON) is $(PYTHON_VERSION); expected Python 3.11.2 or a later 3.11.x (pass PYTHON=/path/to/python3.11))
endif
ENV_HOME ?= $(HOME)/.cache/reliable-explanations/envs
PINS := $(shell $(PYTHON) tools/pins.py)
ENV_KEY := $(shell $(PYTHON) tools/pins.py --key)
ENV_DIR := $(ENV_HOME)/$(ENV_KEY)
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install editable fashion-mnist browser demo test test-all test-oldest bench lint docs env-key clean-env
.PHONY: population table1 figure9 sigma check-dataset

install: $(VENV)/.complete editable fashion-mnist browser

$(ENV_DIR)/.complete:
	@echo ">> building environment $(ENV_DIR)"
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null && \
	  echo ">> installed the Debian package python3-venv (venv for $(PYTHON))"; } || { \
	  echo "error: $(PYTHON) cannot make virtual environments; run 'sudo apt-get install python3-venv'" >&2; exit 1; }
	rm -rf "$(ENV_DIR)"
	$(PYTHON) -m venv "$(ENV_DIR)"
	"$(ENV_DIR)/bin/python" -m pip install --quiet $(PINS)
	"$(ENV_DIR)/bin/python" -m pip install --quiet --no-deps $(shell $(PYTHON) tools/pins.py --no-deps)
	touch "$(ENV_DIR)/.complete"

$(VENV)/.complete: $(ENV_DIR)/.complete
	@if [ -e "$(VENV)" ] && [ ! -L "$(VENV)" ]; then \
	  echo "error: $(VENV) exists and is not a link made by this Makefile; move it away" >&2; exit 1; fi
	ln -sfn "$(ENV_DIR)" "$(VENV)"

# This checkout installed into the environment as editable, so a script or notebook anywhere
# imports foundation, datamodules, evaluators, lightning_modules and callbacks from it (setup.cfg's packages;
# pyproject.toml names the build backend). Checkouts with the same pins share one environment:
# it imports from the checkout that ran `make install` last (train.py, evaluate.py and the tests
# always import from their own checkout). Skipped where it already points here.
editable: $(VENV)/.complete
	@if [ "$$(cd / && $(abspath $(PY)) -c 'import foundation, os; print(os.path.realpath(foundation.__file__))' \
	  2>/dev/null)" != "$(shell pwd -P)/foundation/__init__.py" ]; then \
	  echo ">> installing $(shell pwd -P) into $(VENV) (editable)"; \
	  $(PY) -m pip install --quiet --no-deps --no-build-isolation -e . || exit 1; fi

# Fashion-MNIST's IDX files come from the Debian package dataset-fashion-mnist. Installed
# only where missing; without apt (or root) this prints what to do and goes on.
FASHION_MNIST_DIR := /usr/share/datasets/fashion-mnist
fashion-mnist:
	@if [ -d "$(FASHION_MNIST_DIR)" ]; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q dataset-fashion-mnist >/dev/null; then \
	  echo ">> installed the Debian package dataset-fashion-mnist ($(FASHION_MNIST_DIR))"; \
	else echo "note: Fashion-MNIST is not installed; to use FashionMNISTDataModule run" \
	  "'sudo apt-get install dataset-fashion-mnist' (Debian/Ubuntu) or pass data_dir to a folder of its IDX files" >&2; fi

# A headless browser for the test of the reliability report's HTML page (Selenium drives it):
# the Debian packages chromium and chromium-driver, installed only where missing; without apt
# (or root) this prints what to do and goes on (the test then skips, naming what is missing).
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null; then \
	  echo ">> installed the Debian packages chromium and chromium-driver"; \
	else echo "note: chromium or chromedriver is not installed; the browser test of the report page skips;" \
	  "run 'sudo apt-get install chromium chromium-driver' (Debian/Ubuntu)" >&2; fi

# The German Credit MLP (seed 0), then 100 seeds of it trained at once: one model's
# accuracy on the 200 test rows moves by about 2 points with the seed alone, and its last
# bits with the CPU; the mean over the seeds does not (docs/reliability.md, "Same seed, same numbers").
# Last, the seed-0 model in portable mode: the same accuracy and weights on any x86-64 CPU.
demo: install
	$(PY) train.py
	$(PY) train.py --config configs/population.yaml --model.size 100 --trainer.enable_progress_bar false
	$(PY) train.py --portable --trainer.enable_progress_bar false

# The paper's figures and tables, each after the population it needs (see docs/reproducing.md,
# "The commands, in order"). DATASET: heloc, german, adult, default_credit
# or gmsc; DATA_DIR: the folder holding the raw files; ARGS: more evaluate.py options.
DATASET ?= german
DATA_DIR ?= ../shared/data
ARGS ?=
POPULATION_DIR := runs/full/$(DATASET)/population-1000

check-dataset:
	@test -f configs/$(DATASET).yaml || { echo "error: DATASET=$(DATASET): expected one of heloc german adult default_credit gmsc" >&2; exit 2; }

# 1,000 seeds with the paper's hyperparameters and 1-point filter; an interrupted run resumes.
population: install check-dataset
	@if [ -f $(POPULATION_DIR)/population.pt ]; then echo "$(POPULATION_DIR)/population.pt is there"; \
	elif [ -f $(POPULATION_DIR)/config.yaml ]; then $(PY) train.py --resume $(POPULATION_DIR); \
	else $(PY) train.py --config configs/population.yaml --config configs/$(DATASET).yaml --data.data_dir $(DATA_DIR) \
	  --population.drop_below_mean 0.01 --trainer.enable_progress_bar false --output_dir runs/full --run_name population-1000; fi

table1: population
	$(PY) evaluate.py consistency --config configs/consistency/$(DATASET).yaml --data_dir $(DATA_DIR) $(ARGS)

figure9: population
	$(PY) evaluate.py landscape --config configs/landscape/$(DATASET).yaml --data_dir $(DATA_DIR) $(ARGS)

sigma: population
	$(PY) evaluate.py sigma --config configs/sigma/$(DATASET).yaml --data_dir $(DATA_DIR) $(ARGS)

# The image protocols' models (docs/reproducing.md, "Image protocols"), each trained once into the fixed
# folder that configs/aggregation, optimised, roar and consistency name; a folder with a
# config.yaml but no metrics.json is an interrupted run, which is resumed. CIFAR10: the
# CIFAR-10 archive (its name names the run's dataset folder); TRAIN_ARGS: more train.py options.
.PHONY: fashion-mnist-cnn cifar10-resnet8 fashion-mnist-members fashion-mnist-mlp-members cifar10-population
CIFAR10 ?= $(DATA_DIR)/images/cifar10-jpeg.tar.gz
CIFAR10_NAME := $(basename $(basename $(notdir $(CIFAR10))))
TRAIN_ARGS ?=
MEMBER_ARGS := --config configs/images/fashion_mnist_cnn.yaml --trainer.max_epochs 1 --model.warmup_epochs 0.3 --log_to none

# $(call train_once,<output_dir>,<dataset folder>,<run name>,<train.py options>): one shell command
define train_once
if [ -f $(1)/$(2)/$(3)/metrics.json ]; then echo "$(1)/$(2)/$(3) is there"; \
elif [ -f $(1)/$(2)/$(3)/config.yaml ]; then $(PY) train.py --resume $(1)/$(2)/$(3); \
else $(PY) train.py $(4) $(TRAIN_ARGS) --output_dir $(1) --run_name $(3); fi
endef

# reference model (b): the small CNN, 5 epochs (91.89 %)
fashion-mnist-cnn: install
	@$(call train_once,runs,fashion_mnist,cnn-seed0,--config configs/images/fashion_mnist_cnn.yaml)

# reference model (a): ResNet-8, 20 epochs (81.19 %)
cifar10-resnet8: install
	@$(call train_once,runs,$(CIFAR10_NAME),resnet8-seed0,--config configs/images/cifar10_resnet8.yaml --data.root $(CIFAR10))

# Watson's and Ley's members: 12 small CNNs (seeds 0-11) and 10 MLPs (seeds 0-9), one epoch each,
# each seed also its data order
fashion-mnist-members: install
	@for s in $$(seq 0 11); do $(call train_once,runs/consistency_images/members/cnn,fashion_mnist,seed$$s,\
	  $(MEMBER_ARGS) --model.seed $$s --data.seed $$s) || exit 1; done

fashion-mnist-mlp-members: install
	@for s in $$(seq 0 9); do $(call train_once,runs/consistency_images/members/mlp,fashion_mnist,seed$$s,\
	  $(MEMBER_ARGS) --model.arch mlp --model.seed $$s --data.seed $$s) || exit 1; done

# eight ResNet-8s (seeds 0-7) as one ImagePopulation, 4 epochs on 20,000 images
cifar10-population: install
	@$(call train_once,runs/consistency_images/cifar10,$(CIFAR10_NAME),population-8,\
	  --config configs/images/cifar10_population.yaml --data.root $(CIFAR10))

# One pytest worker per core (pytest-xdist), whole files per worker so that a module's
# fixtures are built once; each worker computes on one thread (tests/conftest.py).
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 1)
test: install
	$(PY) -m flake8
	$(PY) -m pytest -m "not slow" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-all: install
	$(PY) -m pytest $(PYTEST_ARGS)

# The tests that depend most on the interpreter (archives, image folders) under the oldest
# supported Python, Debian 12's own /usr/bin/python3 (3.11.2), in a second environment built
# the same way and linked as .venv-oldest; .ci/run calls it after `make test`.
OLDEST_PYTHON ?= /usr/bin/python3
OLDEST_TESTS := tests/datamodules/test_archives.py tests/datamodules/test_images.py tests/datamodules/test_datasets_real.py
test-oldest:
	$(MAKE) --no-print-directory PYTHON=$(OLDEST_PYTHON) VENV=.venv-oldest install
	.venv-oldest/bin/python -c 'import sys; print(">> oldest supported Python:", sys.version.split()[0])'
	.venv-oldest/bin/python -m pytest -m "not slow" $(OLDEST_TESTS) $(PYTEST_ARGS)

bench: install
	@for b in $(filter-out bench/_%.py,$(wildcard bench/*.py)); do echo ">> $$b"; $(PY) $$b || exit 1; done

lint: install
	$(PY) -m flake8

# The documentation site (mkdocs.yml) into site/, with no network: every warning (a broken
# link or anchor, a page left out of the nav, a docstring that does not render) is an error.
# The API pages are generated during the build from the packages (tools/docs_api.py).
# tests/docs/test_docs_build.py runs the same build in `make test`. The variables silence the
# banners that the installed MkDocs plugins print about MkDocs 2.0.
DOCS_ENV := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
docs: install
	$(DOCS_ENV) $(PY) -m mkdocs build --strict --site-dir site

env-key:
	@echo $(ENV_KEY)

clean-env:
	rm -rf "$(ENV_DIR)" "$(VENV)"
