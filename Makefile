# make verify: set up and run the main job. make test: set up and run the tests (in parallel,
# TEST_JOBS workers, when pytest-xdist is installed). make fuzz: hunt for the input that breaks
# a kernel. Options go in ARGS: make verify ARGS="--impl sdpa", make fuzz ARGS="--seconds 300".
# On a machine with a CUDA GPU and torch/triton already installed, run
# `make verify PYTHON=python3` or `make test PYTHON=python3` to skip the virtualenv.
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
TEST_JOBS ?= auto
# expanded when the recipe runs, after setup has installed pytest-xdist into the virtualenv
XDIST = $(shell $(PYTHON) -c "import xdist" 2>/dev/null && echo "-n $(TEST_JOBS) --dist loadgroup")
# torch: the CPU wheel this project's machines carry; CUDA machines bring their own
TORCH_CPU ?= torch==2.13.0
STAMP := $(VENV)/.installed
# import-linter (lint-imports) run by the python that runs the tests: the layers in pyproject.toml.
# The virtualenv always has it; a python without it (PYTHON=python3 on a GPU machine) says so.
LINT_IMPORTS = $(PYTHON) -c "import importlinter" 2>/dev/null \
	&& $(PYTHON) -c "import importlinter.cli as cli; cli.lint_imports_command()" \
	|| { $(PYTHON) -c "import importlinter" 2>/dev/null && exit 1; \
	     echo "import layers NOT checked: import-linter is not installed for $(PYTHON)"; }

.PHONY: setup verify fuzz test test-gpu gpu-check compile-gate clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q "$(TORCH_CPU)"
	$(VENV)/bin/pip install -q -e ".[test]"
	touch $(STAMP)

setup: $(if $(filter $(VENV)/bin/python,$(PYTHON)),$(STAMP))

verify: setup
	$(PYTHON) -m fa2check.verify $(ARGS)

fuzz: setup
	$(PYTHON) -m fa2check.fuzz $(ARGS)

test: setup
	$(LINT_IMPORTS)
	$(PYTHON) -m pytest $(XDIST) $(ARGS)

test-gpu:
	$(PYTHON) -m pytest -m gpu $(ARGS)

# on a GPU, before a kernel change lands: verify's full tier, the GPU tests of the backends and a
# fuzz campaign over them, one verdict in 10 minutes (python -m fa2check.gpucheck)
gpu-check: setup
	$(PYTHON) -m fa2check.gpucheck $(ARGS)

compile-gate: setup
	env -u TRITON_INTERPRET $(PYTHON) -m fa2check.compile_gate $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
