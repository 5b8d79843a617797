"""How a command's process starts: Beam's Google Cloud modules only for runs that use Google Cloud, and
few malloc arenas.

``import apache_beam`` imports, whatever the run, the GCS file system (google.cloud.storage), BigQuery,
Pub/Sub and the Dataflow API client, and the DirectRunner imports Pub/Sub's client at every run: about
1 s of a 2-row run's 4 to 5 s (``benchmarks/bench_startup.py``).
Beam imports each of them inside ``try: ... except ImportError``, as optional. A command whose flags name
no gs:// path and no runner but the DirectRunner or the Dask runner needs none of them, so before Beam is
first imported it marks them absent (None in ``sys.modules``: an import of one raises
ModuleNotFoundError, which Beam's guards catch); gs:// paths, Dataflow and any other runner import
everything as before. Only a process launched as a command does this (``python -m pipelines.COMMAND``,
``beam-expmech COMMAND``), from ``pipelines/__init__.py``: a program or test that imports the package
gets all of Beam, since it may meet a gs:// path later.

Memory: glibc gives each thread that allocates an arena of its own (up to 8 a core), and memory freed in one
arena serves no other. The DirectRunner's shuffle is built by one thread and read by another, so each holds
its own high-water mark: 10^8 rows bounded by user (quantiles, 5 rows a user) held 2.75 GB after a peak
of 3.06 GB; with two arenas (``limit_malloc_arenas``) 2.2 to 2.3 GB, in the same time, the peak 2.6 GB in
the bench's median (2.6 to 3.2 over runs: docs/benchmarks.md). A limit the operator set
(MALLOC_ARENA_MAX, GLIBC_TUNABLES) stays theirs.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Sequence

# Beam's optional Google Cloud imports, each guarded there by an except ImportError: the GCS file system
# (apache_beam/io/filesystems.py), BigQuery, Pub/Sub and GCS IO (apache_beam/io/__init__.py), the Dataflow
# API (apache_beam/runners/dataflow/dataflow_runner.py), and Pub/Sub's client, which the DirectRunner's
# apache_beam.io.gcp.pubsub imports at every run (apache_beam/io/gcp/pubsub.py), and Google's API client
# library (apitools), which apache_beam/utils/retry.py imports for the HTTP errors of Google's APIs.
GOOGLE_CLOUD_MODULES = (
    "apache_beam.io.gcp.gcsfilesystem",
    "apache_beam.io.gcp.bigquery",
    "google.cloud.dataflow",
    "google.cloud.pubsub",
    "apitools",
)
# Runners that need none of them: the DirectRunner (in-process or multi-process) and the Dask runner.
LOCAL_RUNNERS = ("DirectRunner", "DaskRunner", "apache_beam.runners.dask.dask_runner.DaskRunner")
COMMAND_NAMES = ("beam-expmech",)
MALLOC_ARENAS = 2  # glibc hands threads the arenas in turn, the main one first
_M_ARENA_MAX = -8  # mallopt's parameter number (glibc's malloc.h)


def launched_as_command(orig_argv: Sequence[str] | None = None) -> bool:
    """Whether this process is ``python [options] -m pipelines.NAME`` or the ``beam-expmech`` script."""
    argv = list(sys.orig_argv if orig_argv is None else orig_argv)
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m":
            return argv[i + 1].startswith("pipelines.")
    return len(argv) > 1 and argv[1].rsplit("/", 1)[-1] in COMMAND_NAMES


def uses_google_cloud(argv: Sequence[str]) -> bool:
    """Whether a command line may need Beam's Google Cloud modules: a gs:// path anywhere in it, or a
    runner other than the DirectRunner and the Dask runner (Dataflow, a portable runner, ...)."""
    if any("gs://" in arg for arg in argv):
        return True
    for i, arg in enumerate(argv):
        if arg == "--runner" and i + 1 < len(argv):
            runner = argv[i + 1]
        elif arg.startswith("--runner="):
            runner = arg.partition("=")[2]
        else:
            continue
        if runner not in LOCAL_RUNNERS:
            return True
    return False


def skip_unused_google_cloud(argv: Sequence[str]) -> bool:
    """Before Beam is imported, mark its Google Cloud modules absent when ``argv`` needs none of them.
    Returns whether it did (never once Beam is imported: then it is too late to matter)."""
    if "apache_beam" in sys.modules or uses_google_cloud(argv):
        return False
    for name in GOOGLE_CLOUD_MODULES:
        sys.modules.setdefault(name, None)
    return True


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """At most ``arenas`` glibc malloc arenas in this process (as MALLOC_ARENA_MAX would set at its start),
    and MALLOC_ARENA_MAX for the processes it starts (the DirectRunner's multi-process workers): threads
    share them, so memory one thread frees serves the others. It matters only before threads allocate
    (glibc fixes its limit when it first needs one), so call it first. Returns whether glibc took the
    setting: not elsewhere (musl, macOS, Windows), and not where the operator set a limit of their own."""
    if "MALLOC_ARENA_MAX" in os.environ or "malloc.arena_max" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        if platform.system() != "Linux" or not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        import ctypes

        accepted = bool(ctypes.CDLL(None).mallopt(_M_ARENA_MAX, arenas))
    except (ImportError, OSError, AttributeError, ValueError):  # no ctypes, no glibc symbol: nothing to limit
        return False
    if accepted:
        os.environ["MALLOC_ARENA_MAX"] = str(arenas)
    return accepted
