# The two commands a newcomer runs (README): `make demo` and `make test`.
# Each creates .venv if it is missing and installs the package with what it needs.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test lint bench clean

$(VENV)/.installed-%: setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$*]"
	touch $@

$(VENV)/.installed-base: setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

demo: $(VENV)/.installed-base
	$(PY) -m pipelines.demo

test: $(VENV)/.installed-test
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -q tests

bench: $(VENV)/.installed-bench
	$(PY) -m benchmarks.bench_mechanisms
	$(PY) -m benchmarks.bench_select
	$(PY) -m benchmarks.bench_quantiles
	$(PY) -m benchmarks.bench_synth

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
