"""The demo: generate a purchases table, then release its top-3 categories with pipelines.select.

    python -m pipelines.demo [--rows N] [--epsilon E] [--workdir DIR] [Beam options]

The table has one row per purchase (user_id, category, amount); a user makes many purchases,
so the privacy unit is the user and each keeps at most 5 rows (sensitivity 5). The select
pipeline reads the Parquet file in record batches on the DirectRunner, bounds contributions,
counts each category, and releases only the exponential mechanism's top 3.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import console, flags, select

CATEGORIES = [f"category-{i:02d}" for i in range(50)]


def popularity() -> np.ndarray:
    """The generator's public category distribution (Zipf-like, shuffled), a parameter of the demo."""
    weights = 1.0 / np.arange(1, len(CATEGORIES) + 1) ** 0.8
    order = np.random.default_rng(7).permutation(len(CATEGORIES))
    return (weights / weights.sum())[np.argsort(order)]


def generate(path: str, rows: int, seed: int = 2026) -> None:
    """Purchases by about rows / 10 users, written as Parquet in row groups of 2^18."""
    rng = np.random.default_rng(seed)
    with pq.ParquetWriter(
        path, pa.schema([("user_id", pa.int64()), ("category", pa.string()), ("amount", pa.float64())])
    ) as out:
        for start in range(0, rows, 1 << 18):
            n = min(1 << 18, rows - start)
            table = pa.table(
                {
                    "user_id": rng.integers(0, max(1, rows // 10), n),
                    "category": pa.array(CATEGORIES).take(rng.choice(len(CATEGORIES), size=n, p=popularity())),
                    "amount": np.round(rng.gamma(2.0, 15.0, n), 2),
                }
            )
            out.write_table(table)


def main(argv: list[str] | None = None) -> int:
    parser = flags.ArgumentParser(command="demo", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="generated purchases (default 10^6)")
    parser.add_argument("--epsilon", type=float, default=1.0, help="the privacy guarantee (default 1)")
    parser.add_argument(
        "--workdir",
        default=os.path.join(tempfile.gettempdir(), "beam_expmech_demo"),
        help="where the generated data and the release go",
    )
    args, beam_args = parser.parse_known_args(argv)
    if args.rows < 1:
        raise ValueError(f"--rows must be >= 1, got {args.rows}")

    os.makedirs(args.workdir, exist_ok=True)
    data = os.path.join(args.workdir, "purchases.parquet")
    candidates = os.path.join(args.workdir, "categories.txt")
    generate(data, args.rows)
    with open(candidates, "w") as handle:
        handle.write("\n".join(CATEGORIES) + "\n")
    print(f"generated {args.rows:,} purchases by {max(1, args.rows // 10):,} users in {data}")

    release = os.path.join(args.workdir, "top3.json")
    status = select.main(
        [
            "--input", data, "--column", "category", "--candidates", candidates,
            "--privacy-unit", "user_id", "--max-rows-per-unit", "5",
            "--epsilon", str(args.epsilon), "--top-k", "3", "--output", release, *beam_args,
        ]
    )  # fmt: skip
    ranking = [CATEGORIES[r] for r in np.argsort(-popularity(), kind="stable")[:3]]
    print(f"the generator's most popular categories (a public parameter, not read from the data): {', '.join(ranking)}")
    return status


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
