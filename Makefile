# The two commands a newcomer runs (README): `make demo` and `make test`.
# Each creates .venv if it is missing and installs the package with what it needs.
# `make test-airflow` runs the Airflow DAG for real, with Airflow in its own .venv-airflow.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
AIRFLOW_VENV := .venv-airflow

.PHONY: demo test test-airflow audit audit-long audit-mutants bench clean

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
	$(PY) -m pytest -q -n auto --dist worksteal --durations=25 -m "not airflow" tests

# The privacy audit alone (it is part of `make test`), with its table of worst cases against bounds.
audit: $(VENV)/.installed-test
	$(PY) -m pytest -q tests/audit --audit-table

# The same with far more random datasets and seeded runs (tens of minutes).
audit-long: $(VENV)/.installed-test
	BEAM_EXPMECH_AUDIT_LONG=1 $(PY) -m pytest -q tests/audit --audit-table

# Plants known bugs one at a time in a scratch copy and checks that the audit catches each (a table).
audit-mutants: $(VENV)/.installed-test
	$(PY) tests/audit/mutants.py

$(AIRFLOW_VENV)/.installed: deploy/airflow/requirements.txt
	test -x $(AIRFLOW_VENV)/bin/python || $(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(AIRFLOW_VENV)/bin/python -m pip install --quiet -r deploy/airflow/requirements.txt
	touch $@

test-airflow: $(VENV)/.installed-test $(AIRFLOW_VENV)/.installed
	BEAM_EXPMECH_AIRFLOW_PYTHON=$(abspath $(AIRFLOW_VENV))/bin/python $(PY) -m pytest -q -m airflow tests

bench: $(VENV)/.installed-bench
	$(PY) -m benchmarks.bench_mechanisms
	$(PY) -m benchmarks.bench_startup
	$(PY) -m benchmarks.bench_select
	$(PY) -m benchmarks.bench_keys
	$(PY) -m benchmarks.bench_bounding
	$(PY) -m benchmarks.bench_quantiles
	$(PY) -m benchmarks.bench_synth

clean:
	rm -rf $(VENV) $(AIRFLOW_VENV) .pytest_cache .ruff_cache
