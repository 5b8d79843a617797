"""How a command meets its user: exit codes, logging on stderr, and one line instead of a traceback."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence

from beam_expmech.io.errors import InputError, describe_error
from beam_expmech.ledger import AlreadyReleased, LostReleaseError, OverspendError, ReleaseBusyError
from beam_expmech.releases.passes import JobFailedError
from beam_expmech.releases.runners import RunnerUnavailableError

# Exit codes: the job failed after it started reading (its charge stays), its runner cannot be reached or
# another attempt of its release id is running (found before the charge: nothing spent; try again later), a
# usage error (nothing spent), the budget would be overspent (nothing spent).
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
        handler.addFilter(lambda record: _end_open_line() or True)  # a log line never lands on a bar's line
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
    """Run ``main``; a user error becomes one line on stderr and exit code 2, never a traceback. A SIGTERM (a
    scheduler's kill, a timeout) ends it as an exception would: a reservation it holds is marked failed."""
    configure_logging(sys.argv[1:] if argv is None else argv)
    handler = signal.signal(signal.SIGTERM, _terminated) if threading.current_thread() is threading.main_thread() \
        else None  # fmt: skip
    try:
        return main(argv)
    except AlreadyReleased as done:  # a release id run again: nothing to do is success
        print(done)
        return 0
    except (InputError, ValueError) as error:
        return _error(error, USAGE_ERROR)
    except OverspendError as error:
        return _error(error, BUDGET_ERROR)
    except (JobFailedError, RunnerUnavailableError, ReleaseBusyError, LostReleaseError) as error:
        return _error(error, JOB_ERROR)
    finally:
        _end_open_line()
        if handler is not None:  # a host's own handler, as it was
            signal.signal(signal.SIGTERM, handler)


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _error(error: Exception, code: int) -> int:
    _end_open_line()  # a bar the run left open: the error starts a line of its own
    print(f"error: {error}", file=sys.stderr)
    return code


def terminal_progress() -> Callable[[str, float, float], None] | None:
    """``draw_progress`` where stderr is a terminal; None elsewhere (a log file, a scheduler): no bars there."""
    return draw_progress if sys.stderr.isatty() else None


_open_line = [False]  # a bar drawn and not yet ended: an error line must start on a line of its own


def draw_progress(what: str, done: float, total: float) -> None:
    """One line on the terminal's stderr, redrawn in place: ``what``, a bar, and how far (``done`` of ``total``
    where they are ints, rounds say; else a share: bytes, rho, work). The call with done >= total ends the line,
    so the summary line after it starts on a line of its own (the bar is on stderr, the summary on stdout); so
    does an error (``run_cli``) or a log line."""
    share = min(1.0, done / total) if total > 0 else 1.0
    filled = round(30 * share)
    counted = isinstance(done, int) and isinstance(total, int)
    amount = f"{done:,} of {total:,}" if counted else f"{share:.0%}"
    _open_line[0] = done < total
    end = "" if _open_line[0] else "\n"
    print(f"\r{what} [{'#' * filled}{'.' * (30 - filled)}] {amount}\x1b[K", end=end, file=sys.stderr, flush=True)


def _end_open_line() -> None:
    if _open_line[0]:
        _open_line[0] = False
        print(file=sys.stderr, flush=True)
