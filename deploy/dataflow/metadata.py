"""Write each pipeline's Flex Template metadata.json from its command line, so the two never drift.

    python -m deploy.dataflow.metadata        # rewrites deploy/dataflow/<pipeline>/metadata.json

A parameter per flag that takes a value (Dataflow passes --name=value; names use underscores,
which every pipeline accepts beside its hyphenated flags). --dry-run and the test-only --seed
are left out. Beam's own options (--temp_location, --max_num_workers, ...) are Dataflow's.
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

PIPELINES = ("select", "quantiles", "learn", "synthesize")
HERE = Path(__file__).resolve().parent


def parameters(parser: argparse.ArgumentParser) -> list[dict]:
    found = []
    for action in parser._actions:
        if not action.option_strings or action.nargs == 0 or action.help == argparse.SUPPRESS:
            continue
        name = action.dest
        found.append(
            {
                "name": name,
                "label": name.replace("_", " ").capitalize(),
                "helpText": action.help or name.replace("_", " "),
                "isOptional": not action.required,
            }
        )
    return found


def metadata(pipeline: str) -> dict:
    module = importlib.import_module(f"pipelines.{pipeline}")
    parser = module.build_parser()
    return {
        "name": f"beam-expmech {pipeline}",
        "description": parser.description,
        "parameters": parameters(parser),
    }


def main() -> None:
    for pipeline in PIPELINES:
        folder = HERE / pipeline
        folder.mkdir(exist_ok=True)
        (folder / "metadata.json").write_text(json.dumps(metadata(pipeline), indent=2) + "\n")


if __name__ == "__main__":
    main()
