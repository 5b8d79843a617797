"""The flags every command shares, and their checks (before anything is read or spent)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from beam_expmech.io import readers
from beam_expmech.releases import Budget, Files, PrivacyUnit, PrivateRelease, runners
from beam_expmech.releases.private_release import Query
from pipelines.console import LOG_LEVELS, USAGE_ERROR


def add_input_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="a file, a glob, or gs://bucket/path (Parquet, CSV or Avro)")
    parser.add_argument("--format", choices=readers.FORMATS, help="the input format (default: from the file extension)")
    parser.add_argument(
        "--delimiter", default=",", type=delimiter, help="CSV only: the character between fields (default ','; "
        "';', '|', or '\\t' for a tab)",
    )  # fmt: skip
    parser.add_argument(
        "--dead-letter",
        help="where to keep rejected rows, with the reason (CSV, local or gs://): raw data, an operator's file; "
        "refused inside --output's folder (default: none kept, only counted)",
    )


def delimiter(text: str) -> str:
    """--delimiter's value: a tab for '\\t' as a shell passes it (two characters), or for 'tab'."""
    return "\t" if text in ("\\t", "tab") else text


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (``error: ...``, exit 2), not the whole usage text.

    Every ``--some-flag`` is also accepted as ``--some_flag`` (not shown in --help): Dataflow
    Flex Template parameter names use underscores. Every command takes ``--log-level``. Flags are
    taken by their whole names (no abbreviation), and ``parse_known_args`` refuses what is neither
    a flag of the command nor one of Beam's pipeline options, before anything is read or spent.
    ``command`` (the pipeline's name) names the program in the usage line and errors: ``prog_of``.
    """

    def __init__(self, *args, command: str | None = None, **kwargs):
        if command is not None:
            kwargs["prog"] = self.prog_of(command)
        epilog = "Flags are taken by their whole names. Beam's pipeline options (--runner, ...) pass through to Beam."
        super().__init__(*args, allow_abbrev=False, epilog=kwargs.pop("epilog", epilog), **kwargs)
        self.add_argument(
            "--log-level", choices=LOG_LEVELS, default="INFO", help="what to log on stderr (default INFO)"
        )

    @staticmethod
    def prog_of(command: str) -> str:
        """How the user started ``command``: ``beam-expmech COMMAND`` (dashes) when this process is the
        ``beam-expmech`` script or ``python -m pipelines.cli``, else ``python -m pipelines.COMMAND`` (underscores)."""
        main_module = getattr(sys.modules.get("__main__"), "__spec__", None)
        if sys.argv[0].rsplit("/", 1)[-1] == "beam-expmech" or getattr(main_module, "name", "") == "pipelines.cli":
            return f"beam-expmech {command.replace('_', '-')}"
        return f"python -m pipelines.{command.replace('-', '_')}"

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
    parser.add_argument(
        "--release-id", help="with --budget-ledger: your name for this release (say, top_items/2026-12-01), so that "
        "it is charged and written once however often it runs: done already, it exits 0 and reads nothing; after a "
        "failed attempt, it runs again under that attempt's charge",
    )  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="print the plan; read no data, spend nothing")
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)  # tests only: the release is then not private


def declared_release(args: argparse.Namespace, query: Query, *, delta: float = 0.0,
                     max_keys: int | None = None) -> PrivateRelease:  # fmt: skip
    """The release the shared flags (input, privacy unit, budget, output, dead letter) declare around ``query``."""
    source = Files(args.input, args.format, delimiter=args.delimiter)
    return PrivateRelease(source=source, query=query, output=args.output,
                          unit=PrivacyUnit(args.privacy_unit, args.max_rows_per_unit, max_keys),
                          budget=Budget(args.epsilon, delta, args.budget_ledger, args.dataset_id, args.release_id),
                          dead_letter=args.dead_letter, seed=args.seed)  # fmt: skip
