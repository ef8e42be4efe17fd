# Two commands set everything up (see README):
#   make lab    create the environment, write or update your own copy of the lessons in my-workbook/
#               (blank exercises; a notebook you changed is never overwritten) and open JupyterLab on it
#   make test   create the environment and run the test suite (what CI runs; under 40 min on 2 cores)
#   make test-fast   the tests that start no process and run no notebook (while you work)
#   make test-all    make test plus the exhaustive tier (every student edition executed; before a release)
# make lab-instructor opens the solved notebooks (notebooks/, with the instructor notes) instead.
# Language: EFFITRAIN_LANG=en (default) or pt-BR, e.g. `make lab EFFITRAIN_LANG=pt-BR` (your copy in Brazilian
# Portuguese; `make editions EFFITRAIN_LANG=pt-BR` likewise): make passes it on to effitrain and the kernels.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
TORCH_VERSION   ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
STAMP  := $(VENV)/.effitrain-installed
# The learner's folder (git-ignored): $EFFITRAIN_WORKBOOK when set, else my-workbook/
WORKBOOK ?= $(or $(EFFITRAIN_WORKBOOK),my-workbook)
# Waiting threads sleep instead of spinning, in the tests and everything they start (effitrain_helpers/__init__.py)
export OMP_WAIT_POLICY ?= PASSIVE

# JupyterLab settings of the workbook's environment (no news or update pop-up): an overrides.d file, so a
# user's own overrides.json stays theirs.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d/effitrain.json

.PHONY: env lab lab-instructor test test-fast test-all test-browser bench notebooks editions clean site site-env

env: $(STAMP) $(LAB_OVERRIDES)

# torch first: the CPU wheel on machines without an NVIDIA GPU (never a multi-GB CUDA build there),
# the default PyPI build (CUDA on Linux) where nvidia-smi finds a GPU. Then the package and its test extras.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@if $(BIN)/python -c "import torch" 2>/dev/null; then \
		echo "torch already installed: $$($(BIN)/python -c 'import torch; print(torch.__version__)')"; \
	elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "NVIDIA GPU found: installing the CUDA build of torch $(TORCH_VERSION)"; \
		$(BIN)/pip install "torch==$(TORCH_VERSION)"; \
	elif [ "$$(uname -s)" = "Linux" ]; then \
		echo "no NVIDIA GPU: installing the CPU build of torch $(TORCH_VERSION)"; \
		$(BIN)/pip install --no-deps --no-index "torch==$(TORCH_VERSION)+cpu" 2>/dev/null \
		|| $(BIN)/pip install --no-deps "torch==$(TORCH_VERSION)+cpu" --index-url $(TORCH_CPU_INDEX); \
	else \
		$(BIN)/pip install "torch==$(TORCH_VERSION)"; \
	fi
	$(BIN)/pip install -e ".[test]"
	@# nbgrader (a test dependency) brings JupyterLab menus and server extensions the workbook does not use: off
	-@$(BIN)/jupyter labextension disable --level=sys_prefix @jupyter/nbgrader >/dev/null 2>&1
	-@for e in formgrader validate_assignment assignment_list course_list; do \
		$(BIN)/jupyter server extension disable --sys-prefix nbgrader.server_extensions.$$e >/dev/null 2>&1; done
	@# the kernels' threads sleep while they wait for work (effitrain_helpers/__init__.py says why)
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (effitrain)" \
		--env OMP_WAIT_POLICY PASSIVE >/dev/null
	@touch $(STAMP)

$(LAB_OVERRIDES): tools/jupyterlab-overrides.json | $(STAMP)
	mkdir -p $(dir $@)
	cp $< $@

lab: env
	$(BIN)/effitrain workbook --dir $(WORKBOOK)
	$(BIN)/jupyter lab $(WORKBOOK)

lab-instructor: env
	$(BIN)/jupyter lab notebooks/

test: env
	@start=$$(date +%s); \
	HF_HUB_OFFLINE=1 EFFITRAIN_SIZE=small $(BIN)/python -m pytest -m "not exhaustive"; status=$$?; \
	echo "test suite took $$(( $$(date +%s) - start )) s"; exit $$status

# Everything, the exhaustive tier included (README, Contributing): before a release or a change to editions.
# The site's tests build part of it, so the [site] extra is installed first.
test-all: site-env
	@start=$$(date +%s); \
	HF_HUB_OFFLINE=1 EFFITRAIN_SIZE=small $(BIN)/python -m pytest; status=$$?; \
	echo "all tests took $$(( $$(date +%s) - start )) s"; exit $$status

# The fast tier (README, Contributing): no process started, no notebook run; the linter included.
test-fast: env
	@start=$$(date +%s); \
	HF_HUB_OFFLINE=1 EFFITRAIN_SIZE=small $(BIN)/python -m pytest -m "not slow" tests; status=$$?; \
	echo "fast tests took $$(( $$(date +%s) - start )) s"; exit $$status

# The browser tests alone (tests/browser/: JupyterLab in headless Chromium; see README, Contributing), those
# `make test` runs: the exhaustive one (the site's pages) needs the [site] extra and runs under `make test-all`.
test-browser: env
	@start=$$(date +%s); \
	HF_HUB_OFFLINE=1 EFFITRAIN_SIZE=small $(BIN)/python -m pytest tests/browser -m "browser and not exhaustive"; status=$$?; \
	echo "browser tests took $$(( $$(date +%s) - start )) s"; exit $$status

bench: env
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/run_benchmarks.py

# Re-execute every notebook offline and store only the outputs the policy keeps (README, Contributing).
notebooks: env
	$(BIN)/python tools/notebook_outputs.py notebooks/*.ipynb

# Classroom editions (README, "Classroom"): EDITIONS=folder, EDITIONS_FLAGS=--no-solutions for a graded class.
# The folder is the build's own, so it is replaced (--force) on every run.
EDITIONS ?= build/editions
EDITIONS_FLAGS ?=
editions: env
	$(BIN)/effitrain editions --out $(EDITIONS) --force $(EDITIONS_FLAGS)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache

# The workbook as a static site (README, "The workbook as a site"): every lesson executed, both languages, into
# build/site/ (index.html at its root). A release step: the exhaustive tier builds only the part its browser test opens.
# A second `make site` re-executes only the lessons whose code changed (jupyter-cache, build/site-cache/).
# MathJax 3 is fetched once (npm pack, version and checksum pinned in tools/site.py) into build/mathjax-*/.
site-env: env
	$(BIN)/pip install -q -e ".[site]"

site: site-env
	@start=$$(date +%s); \
	HF_HUB_OFFLINE=1 EFFITRAIN_SIZE=small $(BIN)/python tools/site.py; status=$$?; \
	echo "site took $$(( $$(date +%s) - start )) s"; exit $$status
