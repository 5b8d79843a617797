"""Write each pipeline's Flex Template metadata.json from its command line, so the two never drift.

    python -m deploy.dataflow.metadata        # rewrites deploy/dataflow/<pipeline>/metadata.json

A parameter per flag that takes a value (Dataflow passes --name=value; names use underscores,
which every pipeline accepts beside its hyphenated flags). --dry-run and the test-only --seed
are left out. Beam's own options (--temp_location, --max_num_workers, ...) are Dataflow's.
Where a parameter has a shape, its ``regexes`` let Dataflow refuse a bad value before a job starts: a
number or an integer (the flag's type), one of its choices, a gs:// path (a template reads and writes
Cloud Storage), a range or a list of numbers.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
from pathlib import Path

PIPELINES = ("select", "quantiles", "learn", "synthesize")
HERE = Path(__file__).resolve().parent
NUMBER = r"[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?"
INTEGER = r"[+-]?[0-9]+"
GCS_PATH = r"^gs://[a-z0-9][-_.a-z0-9]*/.+$"
SHAPES = {  # by name, for flags whose type is text
    "input": GCS_PATH,
    "output": GCS_PATH,
    "dead_letter": GCS_PATH,
    "budget_ledger": GCS_PATH,
    "domain": GCS_PATH,
    "candidates": GCS_PATH,
    "candidate_range": f"^{INTEGER}:{INTEGER}$",
    "quantiles": f"^ *{NUMBER} *(, *{NUMBER} *)*$",  # as --quantiles reads them: "0.1, 0.5" too
    "delimiter": r"^([^\r\n\"]|\\t|tab)$",  # one character, or \t or tab for a tab
}


def regex(action: argparse.Action) -> str | None:
    """The shape of the flag's values, as one regular expression, or None where any text may do."""
    if action.choices:
        return "^(" + "|".join(re.escape(str(choice)) for choice in action.choices) + ")$"
    if action.type is float:
        return f"^{NUMBER}$"
    if action.type is int:
        return f"^{INTEGER}$"
    return SHAPES.get(action.dest)


def parameters(parser: argparse.ArgumentParser) -> list[dict]:
    found = []
    for action in parser._actions:
        if not action.option_strings or action.nargs == 0 or action.help == argparse.SUPPRESS:
            continue
        name = action.dest
        parameter = {
            "name": name,
            "label": name.replace("_", " ").capitalize(),
            "helpText": action.help or name.replace("_", " "),
            "isOptional": not action.required,
        }
        shape = regex(action)
        found.append(parameter if shape is None else parameter | {"regexes": [shape]})
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
