# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates .venv if missing and installs in the required order (README, "Install by hand"): torch 2.14.1 with
# torchvision 0.29.1 first (nnunetv2 needs a torchvision whose import works with the installed torch), then this
# project with its extras.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.monai-unc-installed
# modules whose docstring examples run as doctests (the public API documented with Google-style docstrings)
DOCTEST_PATHS := monai_unc/metrics monai_unc/inferers monai_unc/networks monai_unc/regions.py \
	monai_unc/measures.py monai_unc/aggregation.py monai_unc/activation.py monai_unc/temperature.py \
	monai_unc/report/markup.py

.PHONY: install test demo lint clean bench validate gpu-check

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e ".[dev,examples,nnunet]"
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check .

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -n 2 --durations=15 -q
	$(PY) -m pytest -q -p no:cacheprovider --doctest-modules $(DOCTEST_PATHS)

demo: $(STAMP)
	$(VENV)/bin/monai-unc demo --output demo_output

# the validation studies of docs/validation.md (about 40 CPU minutes); see docs/validation/run_all.py
validate: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) docs/validation/run_all.py

# on a machine with a GPU: the CUDA tests and the GPU benchmarks in one command (at most 8 minutes), written to
# gpu_check_output/gpu_check.json and .md (benchmarks/gpu_check.py; `--device cpu --quick` rehearses it on the CPU)
gpu-check: $(STAMP)
	$(PY) benchmarks/gpu_check.py --out gpu_check_output

bench: $(STAMP)
	$(PY) benchmarks/bench_inferers.py

clean:
	rm -rf demo_output gpu_check_output .pytest_cache .ruff_cache
