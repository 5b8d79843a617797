"""The flags every command shares, and their checks (before anything is read or spent)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import NoReturn

from beam_expmech.io import readers, writers
from beam_expmech.io.validation import ColumnSpec
from pipelines import runners
from pipelines.console import LOG_LEVELS, USAGE_ERROR


def add_input_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="a file, a glob, or gs://bucket/path (Parquet, CSV or Avro)")
    parser.add_argument("--format", choices=readers.FORMATS, help="the input format (default: from the file extension)")
    parser.add_argument(
        "--dead-letter",
        help="where to keep rejected rows, with the reason (CSV, local or gs://): raw data, an operator's file; "
        "refused inside --output's folder (default: none kept, only counted)",
    )


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (``error: ...``, exit 2), not the whole usage text.

    Every ``--some-flag`` is also accepted as ``--some_flag`` (not shown in --help): Dataflow
    Flex Template parameter names use underscores. Every command takes ``--log-level``. Flags are
    taken by their whole names (no abbreviation), and ``parse_known_args`` refuses what is neither
    a flag of the command nor one of Beam's pipeline options, before anything is read or spent.
    """

    def __init__(self, *args, **kwargs):
        epilog = "Flags are taken by their whole names. Beam's pipeline options (--runner, ...) pass through to Beam."
        super().__init__(*args, allow_abbrev=False, epilog=kwargs.pop("epilog", epilog), **kwargs)
        self.add_argument(
            "--log-level", choices=LOG_LEVELS, default="INFO", help="what to log on stderr (default INFO)"
        )

    def parse_known_args(self, args=None, namespace=None):
        """(the command's flags, Beam's options); anything else is a usage error (one line, exit 2), and so is a
        flag of the command given twice (argparse would take the last: --epsilon 1 --epsilon 2 spends 2)."""
        args = list(sys.argv[1:] if args is None else args)
        flags = [a.split("=", 1)[0] for a in args[: [*args, "--"].index("--")] if a.startswith("--")]
        given = [self._option_string_actions[f].dest for f in flags if f in self._option_string_actions]
        twice = [dest for dest in dict.fromkeys(given) if given.count(dest) > 1 and dest != "help"]
        if twice:
            self.error(f"--{twice[0].replace('_', '-')} is given more than once: give it once")
        known, rest = super().parse_known_args(args, namespace)
        try:
            unknown = runners.check_beam_options(rest)
        except ValueError as error:
            self.error(f"a Beam option: {error}")
        if unknown:
            self.error(f"unrecognized argument {unknown[0]!r}: neither a flag of this command nor a Beam pipeline "
                       "option; nothing was read or spent")  # fmt: skip
        return known, rest

    def _add_action(self, action: argparse.Action) -> argparse.Action:
        action = super()._add_action(action)
        for name in action.option_strings:
            if name.startswith("--") and "-" in name[2:]:
                self._option_string_actions["--" + name[2:].replace("-", "_")] = action
        return action

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"error: {self.prog}: {message} (see --help)\n")


def add_privacy_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--epsilon",
        type=float,
        required=True,
        help="privacy loss: how much one privacy unit can change the release's odds, at most a factor e^epsilon "
        "(smaller: more private, noisier)",
    )
    parser.add_argument(
        "--privacy-unit", help="the column that identifies whom the guarantee protects (default: each row is one)"
    )
    parser.add_argument(
        "--max-rows-per-unit",
        type=int,
        help="K: each unit keeps at most K rows, drawn at random; the noise grows with K (with --privacy-unit)",
    )
    parser.add_argument(
        "--budget-ledger", help="ledger file (local or gs://) charged with every release of the dataset, across runs"
    )
    parser.add_argument("--dataset-id", help="the dataset's id in --budget-ledger, whose total budget this run spends")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; read no data, spend nothing")
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)  # tests only: the release is then not private


def check_unit_flags(args: argparse.Namespace) -> None:
    if (args.budget_ledger is None) != (args.dataset_id is None):
        raise ValueError("--budget-ledger and --dataset-id go together")
    if (args.privacy_unit is None) != (args.max_rows_per_unit is None):
        raise ValueError("--privacy-unit and --max-rows-per-unit go together")
    if args.privacy_unit == "":
        raise ValueError("--privacy-unit is empty: name the column that identifies a unit")
    if args.max_rows_per_unit is not None and args.max_rows_per_unit < 1:
        raise ValueError(f"--max-rows-per-unit must be >= 1, got {args.max_rows_per_unit}")
    check_destinations(args)


def check_destinations(args: argparse.Namespace) -> None:
    """--output and --dead-letter (file:// taken as the local path it names) are places a run can write, checked
    before anything is read or spent; the dead letter, raw rows, lies outside the release's folder."""
    ledger = getattr(args, "budget_ledger", None)
    for flag in ("output", "dead_letter"):
        path = getattr(args, flag)
        if path is None:
            continue
        path = path.removeprefix("file://")
        setattr(args, flag, path)
        name = "--" + flag.replace("_", "-")
        if "://" in path and not path.startswith("gs://"):
            raise ValueError(f"{name} must be a local path or gs://BUCKET/...")
        if ledger is not None and writers.location(path) == writers.location(ledger):
            raise ValueError(f"{name} is --budget-ledger: a run must not write over it")
        if not path.startswith("gs://"):
            if os.path.isdir(path) or path.endswith(os.sep):
                raise ValueError(f"{name} names a folder: give a file's path")
            folder = os.path.dirname(os.path.abspath(path))
            while not os.path.exists(folder):  # the run makes the rest of the way
                folder = os.path.dirname(folder)
            try:  # a folder made in it and removed: what the run will do there, known to work, nothing left
                tempfile.TemporaryDirectory(dir=folder).cleanup()
            except OSError as error:
                raise ValueError(f"{name}: {folder} cannot be written ({error.strerror})") from None
    if args.dead_letter is not None and writers.inside(args.dead_letter, writers.published_folder(args.output)):
        raise ValueError("--dead-letter must lie outside the folder of --output (where releases are published): "
                         "the dead letter holds raw rows")  # fmt: skip


def unit_specs(args: argparse.Namespace) -> list[ColumnSpec]:
    """The privacy-unit column, if any: any type, never null."""
    return [ColumnSpec(args.privacy_unit, "any")] if args.privacy_unit else []
