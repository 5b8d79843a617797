"""The demo job: a private top-3 over generated survey answers, on Beam's DirectRunner.

    python -m pipelines.demo [--rows N] [--epsilon E] [--output OUT.json] [Beam options]

Every generated person answers once ("which product category do you buy most?"), so one row
is one privacy unit and each category count has sensitivity 1 and is monotone. The pipeline
generates the answers in record batches, counts each batch with numpy, sums the count vectors
with a CombineFn, and releases only the exponential mechanism's top 3, charged to a budget
before any data exists. Later pipelines (``pipelines.select``) read real files instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

from beam_expmech.accounting import PrivacyBudget, Release
from beam_expmech.mechanisms import accuracy_bound, top_k

CATEGORIES = [f"category-{i:02d}" for i in range(50)]
BATCH_ROWS = 50_000
K = 3
BETA = 0.05


def popularity() -> np.ndarray:
    """The generator's public category distribution (Zipf-like), a parameter of the demo."""
    weights = 1.0 / np.arange(1, len(CATEGORIES) + 1) ** 0.6
    order = np.random.default_rng(7).permutation(len(CATEGORIES))  # shuffled so index != rank
    return (weights / weights.sum())[np.argsort(order)]


def generate_batch(batch: tuple[int, int]) -> np.ndarray:
    """One batch of answers (category codes); seeded by its index so reruns see the same data."""
    index, rows = batch
    rng = np.random.default_rng([2026, index])
    return rng.choice(len(CATEGORIES), size=rows, p=popularity())


class SumCounts(beam.CombineFn):
    """Sums per-batch count vectors; the accumulator is one numpy vector."""

    def create_accumulator(self) -> np.ndarray:
        return np.zeros(len(CATEGORIES), dtype=np.int64)

    def add_input(self, total: np.ndarray, counts: np.ndarray) -> np.ndarray:
        total += counts
        return total

    def merge_accumulators(self, totals) -> np.ndarray:
        return np.sum(list(totals), axis=0, dtype=np.int64)

    def extract_output(self, total: np.ndarray) -> np.ndarray:
        return total


def release_top_k(counts: np.ndarray, *, epsilon: float) -> list[str]:
    """The only step that sees the totals; it releases nothing but the mechanism's output."""
    return [CATEGORIES[r] for r in top_k(counts, K, epsilon=epsilon, sensitivity=1, monotonic=True)]


def write_atomically(path: str, payload: dict) -> None:
    """Write JSON under a temporary name, then rename: a crash never leaves a half file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as handle:
        json.dump(payload, handle, indent=2)
    os.replace(handle.name, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="generated answers (default 10^6)")
    parser.add_argument("--epsilon", type=float, default=1.0, help="the privacy guarantee (default 1)")
    parser.add_argument("--output", default=os.path.join(tempfile.gettempdir(), "beam_expmech_demo.json"))
    args, beam_args = parser.parse_known_args(argv)
    if args.rows < 1:
        parser.error(f"--rows must be >= 1, got {args.rows}")

    budget = PrivacyBudget(epsilon=args.epsilon)
    budget.charge(Release.exponential_mechanism(args.epsilon, label=f"top-{K} categories"))  # before any data
    # Per pick epsilon / K; a union bound over the K picks gives the stated confidence.
    bound = accuracy_bound(
        epsilon=args.epsilon / K, sensitivity=1, beta=BETA / K, num_candidates=len(CATEGORIES), monotonic=True
    )

    batches = [(i, min(BATCH_ROWS, args.rows - start)) for i, start in enumerate(range(0, args.rows, BATCH_ROWS))]
    with beam.Pipeline(options=PipelineOptions(beam_args)) as pipeline:
        _ = (
            pipeline
            | "Batches" >> beam.Create(batches)
            | "Generate" >> beam.Map(generate_batch)  # col: numpy codes, one array per batch
            | "Count" >> beam.Map(np.bincount, minlength=len(CATEGORIES))  # col: counts per batch
            | "Sum" >> beam.CombineGlobally(SumCounts())  # col: one count vector
            | "Select" >> beam.Map(release_top_k, epsilon=args.epsilon)  # col: K labels
            | "Write"
            >> beam.Map(
                lambda selected: write_atomically(
                    args.output,
                    {
                        "selected": selected,
                        "mechanism": "exponential (one-shot top-k)",
                        "epsilon": args.epsilon,
                        "sensitivity": 1,
                        "monotonic": True,
                        "num_candidates": len(CATEGORIES),
                        "accuracy_bound": {"beta": BETA, "per_pick_loss": bound},
                    },
                )
            )
        )

    with open(args.output, encoding="utf-8") as handle:
        selected = json.load(handle)["selected"]
    public_ranking = [CATEGORIES[r] for r in np.argsort(-popularity(), kind="stable")[:K]]
    print(f"beam-expmech demo: a private top-{K} of {len(CATEGORIES)} categories over {args.rows:,} generated answers")
    print(
        f"epsilon = {args.epsilon:g} (exponential mechanism, {args.epsilon / K:g} per pick; "
        "counts: sensitivity 1, monotone)"
    )
    for rank, label in enumerate(selected, 1):
        print(f"  {rank}. {label}")
    print(
        f"accuracy (known before reading the data): with probability >= {1 - BETA:.0%}, each pick's count is "
        f"within {bound:.1f} of the best count not yet picked"
    )
    print(
        "the generator's most popular categories (a public parameter, not read from the data): "
        + ", ".join(public_ranking)
    )
    print(f"budget: spent {budget.spent():g} of {budget.epsilon:g}; release written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
