"""How a command meets its user: exit codes, logging on stderr, and one line instead of a traceback."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from beam_expmech.io.errors import InputError, describe_error
from beam_expmech.ledger import AlreadyReleased, OverspendError
from beam_expmech.releases.passes import JobFailedError
from beam_expmech.releases.runners import RunnerUnavailableError

# Exit codes: the job failed after it started reading (its charge stays) or its runner cannot be reached
# (found before the charge: nothing spent), a usage error (nothing spent), the budget would be overspent
# (nothing spent).
JOB_ERROR = 1
USAGE_ERROR = 2
BUDGET_ERROR = 3
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def configure_logging(argv: Sequence[str]) -> None:
    """Beam's convention: the program sets up logging, the library only logs to its module loggers.

    Ours (``beam_expmech.*``, ``pipelines.*``) log at --log-level on stderr; Beam and the rest stay at
    WARNING whatever --log-level: at DEBUG Beam logs every element it processes, raw rows included.
    Where logging is set up already (a Dataflow worker, Airflow, pytest) its handlers are kept.
    """
    flag = argparse.ArgumentParser(add_help=False)
    flag.add_argument("--log-level", "--log_level", default="INFO")
    level = flag.parse_known_args(argv)[0].log_level
    level = level if level in LOG_LEVELS else "INFO"  # the command's own parser reports a bad value
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.addFilter(_first_line_of_beam_errors)
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
    logging.getLogger("apache_beam").setLevel(logging.WARNING)  # even where a host set the root lower
    # The Dask runner warns "The new default partition size is 128" at every step: it asks nothing of the user.
    logging.getLogger("apache_beam.runners.dask.transform_evaluator").setLevel(logging.ERROR)
    for name in ("beam_expmech", "pipelines"):
        logging.getLogger(name).setLevel(level)


def _first_line_of_beam_errors(record: logging.LogRecord) -> bool:
    """Beam logs a failed step with its traceback; the user sees one line, and of the error only what
    describe_error tells: its text may quote data (so at DEBUG too)."""
    if record.name.startswith("apache_beam") and record.exc_info and record.exc_info[1] is not None:
        record.msg, record.args = f"a step failed: {describe_error(record.exc_info[1])}", ()
        record.exc_info = record.exc_text = None
    elif record.name.startswith("apache_beam") and "\n" in record.getMessage():
        record.msg, record.args = record.getMessage().splitlines()[0], ()
    return True


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run ``main``; a user error becomes one line on stderr and exit code 2, never a traceback."""
    configure_logging(sys.argv[1:] if argv is None else argv)
    try:
        return main(argv)
    except AlreadyReleased as done:  # a release id run again: nothing to do is success
        print(done)
        return 0
    except (InputError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except OverspendError as error:
        print(f"error: {error}", file=sys.stderr)
        return BUDGET_ERROR
    except (JobFailedError, RunnerUnavailableError) as error:
        print(f"error: {error}", file=sys.stderr)
        return JOB_ERROR


def draw_progress(what: str, done: float, total: float) -> None:
    """One line on the terminal's stderr, redrawn in place: ``what``, a bar, and how far (``done`` of ``total``
    where both are whole numbers, else a share). The call with done >= total ends the line, so the summary
    line after it starts on a line of its own (the bar is on stderr, the summary on stdout)."""
    share = min(1.0, done / total) if total > 0 else 1.0
    filled = round(30 * share)
    whole = float(done).is_integer() and float(total).is_integer()
    amount = f"{done:,.0f} of {total:,.0f}" if whole else f"{share:.0%}"
    end = "\n" if done >= total else ""
    print(f"\r{what} [{'#' * filled}{'.' * (30 - filled)}] {amount}", end=end, file=sys.stderr, flush=True)
