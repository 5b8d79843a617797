"""DOMAIN.json files: each column's codes or labels (synthesize, evaluate_synthetic)."""

from __future__ import annotations

import json

from beam_expmech.io import readers
from beam_expmech.io.validation import ColumnSpec

Domain = dict[str, "int | tuple[str, ...]"]


def read_domain(path: str) -> Domain:
    """DOMAIN.json: {"column": number of codes} (values 0 .. n-1) or {"column": ["label", ...]}.

    A labelled column holds the labels in the data and in the output; inside, each label is its
    position in the list.
    """
    try:
        raw = json.loads(readers.read_text(path))
    except ValueError:
        raise ValueError(f"{path}: not a JSON file") from None
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: not a JSON object of columns")
    domain: Domain = {}
    for column, value in raw.items():
        if (
            isinstance(value, list)
            and value
            and all(isinstance(v, str) for v in value)
            and len(set(value)) == len(value)
        ):
            domain[column] = tuple(value)
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            domain[column] = value
        else:
            raise ValueError(f"{path}: column {column!r} needs a size >= 1 or a list of distinct labels, got {value!r}")
    return domain


def domain_sizes(domain: Domain) -> dict[str, int]:
    return {c: v if isinstance(v, int) else len(v) for c, v in domain.items()}


def domain_spec(column: str, value: int | tuple[str, ...]) -> ColumnSpec:
    """How to read a column of the domain: int codes in [0, size), or one of its labels (as its code)."""
    if isinstance(value, int):
        return ColumnSpec(column, "int", domain=(0, value))
    return ColumnSpec(column, "label", labels=value)
