"""``beam-expmech COMMAND [flags]``: every pipeline under one command.

The flags are those of ``python -m pipelines.MODULE``, MODULE the command's name with underscores for
dashes (``beam-expmech evaluate-synthetic`` runs ``pipelines.evaluate_synthetic``); each command's --help
and usage errors name it ``beam-expmech COMMAND`` (``flags.ArgumentParser.prog_of``).
"""

from __future__ import annotations

import importlib
import sys

from pipelines import console

COMMANDS = {
    "select": "private top-k selection",
    "quantiles": "private quantiles",
    "learn": "the private halfspace learner",
    "synthesize": "private synthetic data",
    "evaluate-synthetic": "score synthetic data against the real data (reads it: not a release)",
    "ledger": "the privacy-budget ledger (init, show)",
}


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv[0]`` names with the rest of ``argv`` (default: the process's); its exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        if argv and argv[0] in ("-h", "--help"):
            print("usage: beam-expmech COMMAND [flags]   (beam-expmech COMMAND --help for its flags)")
            width = max(map(len, COMMANDS))
            for name, text in COMMANDS.items():
                print(f"  {name:<{width}}  {text}")
            return 0
        print(f"error: beam-expmech: choose a command: {', '.join(COMMANDS)} (see --help)", file=sys.stderr)
        return console.USAGE_ERROR
    module = importlib.import_module(f"pipelines.{argv[0].replace('-', '_')}")
    return console.run_cli(module.main, argv[1:])


if __name__ == "__main__":
    sys.exit(main())
