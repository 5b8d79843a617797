# The two commands a newcomer runs (README): `make demo` and `make test`.
# Each creates .venv if it is missing and installs the package with what it needs.
# `make test-airflow` runs the Airflow DAG for real, with Airflow in its own .venv-airflow.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
AIRFLOW_VENV := .venv-airflow

.PHONY: demo test chromium test-airflow audit audit-long audit-mutants bench clean

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

test: $(VENV)/.installed-test chromium
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -q -n auto --dist worksteal --durations=25 -m "not airflow" tests

# evaluate_synthetic's report is rendered in headless Chromium by its test: Debian's chromium, installed when
# missing and we are root with apt-get (CI: about 20 s); elsewhere that test skips, and says why.
CHROMIUMS := chromium chromium-browser google-chrome headless_shell
chromium:
	@found=; for name in $(CHROMIUMS); do command -v $$name >/dev/null 2>&1 && found=$$name; done; \
	if [ -z "$$found" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium with apt-get, for the report's rendering test"; \
	    log=$$(mktemp); \
	    if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	          --no-install-recommends chromium) >$$log 2>&1; then cat $$log; rm -f $$log; exit 1; fi; \
	    rm -f $$log; \
	  else \
	    echo "no chromium, and not root with apt-get: the report's rendering tests will skip"; \
	  fi; \
	fi

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
	$(PY) -m benchmarks.bench_tstr

clean:
	rm -rf $(VENV) $(AIRFLOW_VENV) .pytest_cache .ruff_cache
