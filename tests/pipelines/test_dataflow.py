"""--runner DataflowRunner is checked before the charge, in seconds: its flags, credentials and temp bucket
(Beam alone spent about two minutes retrying without credentials, then printed two lines)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from beam_data import purchases, write

from beam_expmech.ledger import Ledger
from beam_expmech.releases import runners
from pipelines import console, select
from pipelines import ledger as ledger_cli

DATAFLOW = ["--runner", "DataflowRunner", "--project", "p", "--region", "europe-west1"]


def shop(tmp_path) -> tuple[list[str], str]:
    """A select run's flags on a fresh ledger of dataset "shop", and the ledger's path."""
    write(purchases(200), tmp_path / "data.parquet", "parquet")
    ledger = str(tmp_path / "ledger.json")
    assert ledger_cli.main(["init", "--budget-ledger", ledger, "--dataset-id", "shop", "--epsilon", "2"]) == 0
    return ["--input", str(tmp_path / "data.parquet"), "--column", "item", "--candidate-range", "0:50",
            "--epsilon", "1", "--output", str(tmp_path / "r.json"), "--budget-ledger", ledger,
            "--dataset-id", "shop"], ledger  # fmt: skip


def test_without_credentials_it_is_one_line_in_seconds_and_nothing_is_charged(tmp_path):
    flags, ledger = shop(tmp_path)
    home = tmp_path / "home"  # no gcloud configuration, no application default credentials
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "STORAGE_EMULATOR"))}
    env |= {"HOME": str(home), "CLOUDSDK_CONFIG": str(home / "gcloud")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pipelines.select", *flags, *DATAFLOW,
                           "--temp_location", "gs://a-bucket/tmp"], env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    seconds = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: Dataflow: no Google Cloud credentials")
    assert seconds < 60  # a refusal, not Beam's two minutes of retries (the check itself takes about 1 s here)
    assert Ledger(ledger).dataset("shop")["releases"] == [] and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    "options,message",
    [
        (["--runner", "DataflowRunner", "--region", "r", "--temp_location", "gs://b/t"], "needs --project"),
        (["--runner", "DataflowRunner", "--project", "p", "--temp_location", "gs://b/t"], "needs --region"),
        (DATAFLOW, "needs --temp_location"),
        (["--runner", "dataflow", "--project", "p", "--temp_location", "gs://b/t"], "needs --region"),  # Beam's alias
        ([*DATAFLOW, "--temp_location", "/tmp/t"], "--temp_location must be gs://BUCKET/PATH on Dataflow"),
        ([*DATAFLOW, "--temp_location", "gs://b/t", "--staging_location", "s"], "--staging_location must be gs://"),
    ],
)
def test_a_dataflow_run_without_its_flags_is_refused_before_the_charge(tmp_path, capsys, options, message):
    flags, ledger = shop(tmp_path)
    capsys.readouterr()
    assert console.run_cli(select.main, [*flags, *options]) == console.USAGE_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert Ledger(ledger).dataset("shop")["releases"] == []


def test_the_temp_locations_bucket_must_exist(gcs_emulator):
    """Against a real GCS server (the emulator, anonymously): a bucket that is there passes, one that is not
    is refused."""
    runners.check_runner([*DATAFLOW, "--temp_location", "gs://test-bucket/tmp"])
    with pytest.raises(runners.RunnerUnavailableError, match="bucket 'no-such-bucket' does not exist"):
        runners.check_runner([*DATAFLOW, "--temp_location", "gs://no-such-bucket/tmp"])
