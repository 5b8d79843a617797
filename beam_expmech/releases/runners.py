"""Which Beam runner a job runs on: the Beam options from the command line, short runner names Beam does not
know, a Dask scheduler checked before any budget is spent, and what a runner may not offer (counters)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
    _BeamArgumentParser,
)
from apache_beam.runners.runner import create_runner

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
# How long the check before the charge waits for Cloud Storage to say whether --temp_location's bucket exists.
GCS_CHECK_TIMEOUT = 10.0
# Runners Beam ships but does not resolve by their short name (it answers "Unexpected pipeline runner").
SHORT_NAMES = {"DaskRunner": DASK_RUNNER}
# How long the check before the charge waits for the scheduler, unless --dask_connection_timeout says.
DEFAULT_CONNECT_TIMEOUT = 5.0
# How long a Dask job waits while its cluster has no worker at all, unless --dask_no_worker_timeout says.
DEFAULT_NO_WORKER_TIMEOUT = 120.0
# How often a Dask job's wait looks at the cluster's workers.
POLL_SECONDS = 1.0


class RunnerUnavailableError(RuntimeError):
    """The runner cannot be reached: found before any budget is charged, so nothing was spent."""


class NoWorkerError(RuntimeError):
    """A Dask job's cluster has had no worker for longer than --dask_no_worker_timeout: the job stops."""


class DaskJobOptions(PipelineOptions):
    """Ours, beside Beam's Dask options: how long a job may wait for a cluster with no worker."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument(
            "--dask_no_worker_timeout",
            type=float,
            default=DEFAULT_NO_WORKER_TIMEOUT,
            help="Seconds a job on Dask waits while its cluster has no worker at all before it fails (every "
            "worker lost and none restarted: Dask itself would wait for ever). Default: %(default)s.",
        )


# Beam options that would release more than the run is charged for: the DirectRunner's bundle repeat runs
# every step again, the private draw with fresh noise, and writes each draw.
REFUSED_OPTIONS = {"direct_runner_bundle_repeat": "it draws the release again with fresh noise, charged once"}


class _OneLineParser(_BeamArgumentParser):
    def error(self, message: str):
        raise ValueError(message)  # not Beam's usage text: one line, as every refusal here


def check_beam_options(beam_args: Sequence[str]) -> list[str]:
    """The arguments among ``beam_args`` (what a command did not know) that are none of Beam's pipeline options
    either, as Beam reads them (its option classes' parser, whole names only): Beam would drop them with a
    warning, and a mistyped --epsilon would then spend the budget the default asks for. A ValueError for a
    Beam option given a bad value, or one of REFUSED_OPTIONS set."""
    if any(arg.startswith("--dask") for arg in beam_args) and importlib.util.find_spec("distributed") is not None:
        import apache_beam.runners.dask.dask_runner  # noqa: F401  (its DaskOptions: --dask_client_address, ...)
    parser = _OneLineParser(allow_abbrev=False)
    for options in {str(c): c for c in PipelineOptions.__subclasses__()}.values():  # as Beam gathers them
        options._add_argparse_args(parser)
    known, unknown = parser.parse_known_args(list(beam_args))
    refused = [name for name in REFUSED_OPTIONS if getattr(known, name, None)]
    if refused:
        raise ValueError(f"--{refused[0]} is refused: {REFUSED_OPTIONS[refused[0]]}")
    return unknown


def pipeline_options(beam_args: Sequence[str]) -> PipelineOptions:
    """Beam's options from the flags the command did not know, with a short runner name made the qualified one."""
    options = PipelineOptions(list(beam_args))
    standard = options.view_as(StandardOptions)
    if isinstance(standard.runner, str) and standard.runner in SHORT_NAMES:
        standard.runner = SHORT_NAMES[standard.runner]
    return options


def is_dask(beam_args: Sequence[str]) -> bool:
    """Whether --runner is Beam's Dask runner, by its short name or its qualified one."""
    return pipeline_options(beam_args).view_as(StandardOptions).runner == DASK_RUNNER


def check_runner(beam_args: Sequence[str]) -> None:
    """Before the charge: that --runner names a runner, and on Dask that it is installed and its scheduler
    answers (a ValueError for the user's mistakes, RunnerUnavailableError for a scheduler that does not).

    Without the check, Beam would find either only once the job is built, after the ledger reserved
    the budget: the run would then be recorded as failed and its budget spent for nothing. On Dataflow,
    ``check_dataflow``. Other runners are left to themselves (the DirectRunner needs nothing).
    """
    if not is_dask(beam_args):
        options = pipeline_options(beam_args)
        runner = options.view_as(StandardOptions).runner
        if isinstance(runner, str):
            resolved = create_runner(runner)  # "Unexpected pipeline runner: ...": a ValueError, exit code 2
            if type(resolved).__name__ == "DataflowRunner":  # by what Beam resolves: "dataflow" is Dataflow too
                check_dataflow(options.view_as(GoogleCloudOptions))
        return
    if importlib.util.find_spec("distributed") is None:
        raise ValueError("--runner DaskRunner needs Dask: pip install 'beam-expmech[dask]'")
    from apache_beam.runners.dask.dask_runner import DaskOptions

    dask = pipeline_options(beam_args).view_as(DaskOptions)
    if dask.address is None:  # a scheduler file, or no address: Beam starts a local cluster of its own
        return
    timeout = dask.timeout if isinstance(dask.timeout, int) else DEFAULT_CONNECT_TIMEOUT
    host, port = _host_and_port(dask.address)
    if host is None:  # another transport (inproc://, ucx://): left to Dask
        return
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__  # "Connection refused", or "TimeoutError"
        raise RunnerUnavailableError(
            f"the Dask scheduler at {dask.address} cannot be reached ({reason}); nothing was spent"
        ) from None


def check_dataflow(gcp: GoogleCloudOptions) -> None:
    """Before the charge, in seconds: that a Dataflow job has its project, region and a gs:// temp location (a
    ValueError), and that Google Cloud credentials can be had and see the temp location's bucket
    (RunnerUnavailableError). Beam itself finds a missing credential only after about two minutes of retries.
    Under a storage emulator (STORAGE_EMULATOR_HOST, tests) the bucket is looked up anonymously there."""
    missing = [flag for flag, value in (("--project", gcp.project), ("--region", gcp.region),
                                        ("--temp_location", gcp.temp_location)) if not value]  # fmt: skip
    if missing:
        raise ValueError(f"--runner DataflowRunner needs {missing[0]} (and --project, --region, --temp_location "
                         "gs://BUCKET/PATH); nothing was spent")  # fmt: skip
    for flag, location in (("--temp_location", gcp.temp_location), ("--staging_location", gcp.staging_location)):
        if location and not location.startswith("gs://"):
            raise ValueError(f"{flag} must be gs://BUCKET/PATH on Dataflow, got {location!r}")
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        client = storage.Client.create_anonymous_client()
    else:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        except DefaultCredentialsError:
            raise RunnerUnavailableError(
                "Dataflow: no Google Cloud credentials (gcloud auth application-default login, or "
                "GOOGLE_APPLICATION_CREDENTIALS=KEY.json); nothing was spent"
            ) from None
        client = storage.Client(project=gcp.project, credentials=credentials)
    bucket = gcp.temp_location[len("gs://") :].split("/", 1)[0]
    from google.api_core.exceptions import Forbidden

    try:
        found = client.lookup_bucket(bucket, timeout=GCS_CHECK_TIMEOUT, retry=None)
    except Forbidden:  # the bucket exists; these credentials may still write objects in it (objectAdmin)
        return
    except Exception as error:  # refused credentials, no network: the type only (a message may hold a token)
        raise RunnerUnavailableError(
            f"Dataflow: Cloud Storage could not be asked for --temp_location's bucket ({type(error).__name__}); "
            "nothing was spent"
        ) from None
    if found is None:
        raise RunnerUnavailableError(f"Dataflow: --temp_location's bucket {bucket!r} does not exist or these "
                                     "credentials cannot see it; nothing was spent")  # fmt: skip


def _host_and_port(address: str) -> tuple[str | None, int | None]:
    """(host, port) of a tcp:// or tls:// address, or of a bare HOST:PORT (Dask reads it as tcp://)."""
    parts = urlsplit(address if "://" in address else "tcp://" + address)
    if parts.scheme not in ("tcp", "tls"):
        return None, None
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ValueError(f"--dask_client_address must be tcp://HOST:PORT, got {address!r}")
    return parts.hostname, port


def wait(result: object, beam_args: Sequence[str]) -> None:
    """Wait for the job to end and raise what it raised. On Dask, bounded: a cluster that has had no worker
    for --dask_no_worker_timeout seconds stops the job (NoWorkerError). A worker lost while others remain
    is Dask's to handle: it reruns the lost tasks elsewhere, up to distributed.scheduler.allowed-failures
    times each (KilledWorker past that); but with no worker left, and none restarted, it waits for ever,
    unless the scheduler sets distributed.scheduler.no-workers-timeout."""
    client = getattr(result, "client", None)
    futures = getattr(result, "futures", None)
    if client is None or futures is None or not is_dask(beam_args):
        result.wait_until_finish()
        return
    import distributed

    limit = pipeline_options(beam_args).view_as(DaskJobOptions).dask_no_worker_timeout
    alone_since = None
    while True:
        try:
            distributed.wait(futures, timeout=POLL_SECONDS)
            break
        except TimeoutError:
            pass
        if client.scheduler_info().get("workers"):
            alone_since = None
        elif alone_since is None:
            alone_since = time.monotonic()
        elif time.monotonic() - alone_since > limit:
            with contextlib.suppress(Exception):
                client.cancel(futures)
            raise NoWorkerError(
                f"the Dask cluster has had no worker for {limit:g} s (--dask_no_worker_timeout)"
            ) from None
    result.wait_until_finish()  # done: raises what a step raised


def close(result: object) -> None:
    """Let go of what the run holds on to: the Dask runner leaves its client connected to the scheduler."""
    client = getattr(result, "client", None)
    if client is None or not hasattr(client, "close"):
        return
    with contextlib.suppress(Exception):  # tidiness only: a lost connection does not fail a written release
        client.close()
