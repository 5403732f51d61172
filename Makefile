# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates .venv if missing and installs in the required order (README, "Install by hand"): torch 2.14.1 with
# torchvision 0.29.1 first (nnunetv2 needs a torchvision whose import works with the installed torch), then this
# project with its extras.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.monai-unc-installed
# modules whose docstring examples run as doctests (the public API documented with Google-style docstrings)
DOCTEST_PATHS := monai_unc/_frames.py monai_unc/_lazy.py monai_unc/_stats_kernels.py monai_unc/metrics monai_unc/inferers monai_unc/networks monai_unc/losses monai_unc/regions.py monai_unc/stats.py \
	monai_unc/measures.py monai_unc/aggregation.py monai_unc/activation.py monai_unc/scores.py monai_unc/temperature.py \
	monai_unc/report/markup.py monai_unc/report/notebook.py monai_unc/report/plots.py monai_unc/report/triage.py \
	monai_unc/report/viewer.py monai_unc/report/palette.py monai_unc/io monai_unc/nnunet monai_unc/data/synthetic.py monai_unc/data/mni152.py \
	monai_unc/data/model.py monai_unc/data/perturbations.py monai_unc/data/cohorts.py monai_unc/data/training.py \
	monai_unc/data/ssn_training.py monai_unc/report/html.py monai_unc/report/reliability.py monai_unc/report/monitor.py \
	monai_unc/monitoring monai_unc/handlers monai_unc/transforms.py monai_unc/keys.py monai_unc/_utils.py monai_unc/_jit.py \
	monai_unc/_digest.py monai_unc/_compat.py \
	monai_unc/evaluation monai_unc/state.py monai_unc/product.py monai_unc/products monai_unc/engine monai_unc/workflows monai_unc/cli.py

.PHONY: install test demo lint clean bench validate gpu-check docs

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e ".[dev,examples,nnunet,docs,viewer,dicom,monitor,fast,ignite]"
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check .

# the doctests sign rule files with a key of a fresh configuration folder, never the user's, removed afterwards
# (tests/conftest.py does the same for the suite)
# the suite and the doctests write Python's bytecode caches (__pycache__, ignored by git) even where the environment
# sets PYTHONDONTWRITEBYTECODE (an empty value turns it off): without them each pytest-xdist worker compiled and
# rewrote the asserts of every test module at collection (about 50 s instead of 18 s on a 2-core machine) and every
# command a test starts in a fresh interpreter compiled the package's modules again (about 1 s each)
# the suite includes the strict build of the documentation site (tests/docs/test_site.py); MONAI_UNC_REQUIRE_DOCS=1
# makes that test fail, not skip, when mkdocs is missing, so a broken link or reference fails `make test` and CI
# the device tests (@pytest.mark.cuda, tests/conftest.py) run in the same session: on the GPU where `nvidia-smi` finds
# one, else on the CPU (MONAI_UNC_TEST_DEVICE=cpu), so they are checked on every machine; a MONAI_UNC_TEST_DEVICE set
# by the caller wins. `make gpu-check` runs them on a GPU with the benchmarks
test: $(STAMP)
	$(PY) -m ruff check .
	PYTHONDONTWRITEBYTECODE= MONAI_UNC_REQUIRE_DOCS=1 \
	MONAI_UNC_TEST_DEVICE="$${MONAI_UNC_TEST_DEVICE:-$$(nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu)}" \
	$(PY) -m pytest -n 2 --dist worksteal --durations=15 -q
	cfg="$$(mktemp -d)"; PYTHONDONTWRITEBYTECODE= MONAI_UNC_CONFIG_DIR="$$cfg" $(PY) -m pytest -q -p no:cacheprovider --doctest-modules \
		$(DOCTEST_PATHS); rc=$$?; rm -rf "$$cfg"; exit $$rc

demo: $(STAMP)
	$(VENV)/bin/monai-unc demo --output demo_output

# the twelve validation studies of docs/validation.md (on one thread about 42 CPU minutes for studies 1-7, an hour
# for study 8, three hours for study 9 and a quarter of an hour for studies 10-12); see docs/validation/run_all.py
validate: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) docs/validation/run_all.py

# on a machine with a GPU: ALL the CUDA tests and the GPU benchmarks in one command (at most 8 minutes), written to
# gpu_check_output/gpu_check.json and .md (benchmarks/gpu_check.py; `--device cpu --quick` rehearses it on the CPU,
# `--tests PATH ...` limits its device tests to those paths, as the rehearsal in CI does)
gpu-check: $(STAMP)
	$(PY) benchmarks/gpu_check.py --out gpu_check_output

# the documentation site (mkdocs.yml): the pages of docs/ and the API reference, built with --strict into site/;
# open site/index.html from disk (works offline). Installs the docs extra first if it is missing.
docs: $(STAMP)
	$(PY) -c "import mkdocs, material, mkdocstrings_handlers.python" 2>/dev/null || $(PY) -m pip install -q -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(PY) benchmarks/bench_inferers.py

clean:
	rm -rf demo_output gpu_check_output site .pytest_cache .ruff_cache
