"""Black-box audit of a whole pipeline: ``pipelines.select`` on two neighbouring tiny datasets.

The counts come from the pipeline's own graph (read, validate, bound, count) on each dataset; the
selection is then drawn many times, seeded, by the pipeline's own final step in one process
(``PrivateSelect.select``: the code its Beam ``expand`` runs). For every output, Clopper-Pearson
intervals (99.9% each) give a lower confidence bound on |ln P(o | D) / P(o | D')|, which must
stay below epsilon. The same audit of a final step declared with the wrong sensitivity must fail.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from audit_log import LONG
from scipy.stats import beta

from beam_expmech.transforms import GatherCounts
from pipelines import common, select

DRAWS = 40_000 if LONG else 4_000
CONFIDENCE = 0.999


def clopper_pearson(successes: int, trials: int) -> tuple[float, float]:
    tail = (1 - CONFIDENCE) / 2
    low = beta.ppf(tail, successes, trials - successes + 1) if successes else 0.0
    high = beta.ppf(1 - tail, successes + 1, trials - successes) if successes < trials else 1.0
    return low, high


def log_ratio_lower_bound(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(the observed max |ln p/q| over outcomes, its lower confidence bound)."""
    observed, certain = 0.0, 0.0
    for x, y in ((a, b), (b, a)):
        for hits_x, hits_y in zip(x, y, strict=True):
            if hits_x and hits_y:
                observed = max(observed, abs(math.log(hits_x / hits_y)))
            low_x, _ = clopper_pearson(int(hits_x), DRAWS)
            _, high_y = clopper_pearson(int(hits_y), DRAWS)
            if low_x > 0:
                certain = max(certain, math.log(low_x / high_y))
    return observed, certain


def pipeline_counts(tmp_path, name: str, users: list[int], items: list[int], flags: list[str]) -> np.ndarray:
    """The summed counts the pipeline's graph computes for this data (its Write step captures them)."""
    path = tmp_path / f"{name}.parquet"
    pq.write_table(pa.table({"user": users, "item": items}), path)
    args, beam_args = select.parse_args(["--input", str(path), *flags, "--output", str(tmp_path / f"{name}.json")])
    family, spec = select.candidate_family(args)
    specs = [spec, *common.unit_specs(args)]
    captured = tmp_path / f"{name}.npy"
    common.counting_pipeline(
        args, beam_args, common.check_input(args, specs), specs, family, GatherCounts(),
        lambda counts: np.save(captured, counts),
    ).run().wait_until_finish()  # fmt: skip
    return np.load(captured)


def frequencies(args, family, counts: np.ndarray, *, sensitivity: float | None = None) -> np.ndarray:
    """How often each candidate is selected over DRAWS seeded runs of the pipeline's final step."""
    hits = np.zeros(family.num_candidates, dtype=int)
    for seed in range(DRAWS):
        args.seed = seed
        step = select.selection(args, family)
        if sensitivity is not None:
            step.sensitivity = sensitivity  # the bug this audit must catch
        hits[step.select([(0, counts)])[0]] += 1
    return hits


def test_select_on_neighbouring_datasets(audit, tmp_path):
    flags = ["--column", "item", "--candidate-range", "0:2", "--privacy-unit", "user", "--max-rows-per-unit", "3",
             "--epsilon", "1"]  # fmt: skip
    # D: ten users, one row each, split evenly; D': one more user with three rows of item 0.
    users, items = list(range(10)), [0] * 5 + [1] * 5
    d = pipeline_counts(tmp_path, "d", users, items, flags)
    d_prime = pipeline_counts(tmp_path, "d_prime", [*users, 10, 10, 10], [*items, 0, 0, 0], flags)
    assert d.tolist() == [5, 5] and d_prime.tolist() == [8, 5]

    args, _ = select.parse_args(["--input", "x", *flags, "--output", "x.json"])
    family, _ = select.candidate_family(args)
    observed, certain = log_ratio_lower_bound(frequencies(args, family, d), frequencies(args, family, d_prime))
    audit.check("pipelines.select (black box)", f"observed max |ln P/P'| ({DRAWS:,} runs each)", cases=2 * DRAWS,
                worst=observed, bound=args.epsilon)  # fmt: skip
    audit.check("pipelines.select (black box)", "its 99.9% Clopper-Pearson lower bound", cases=2 * DRAWS,
                worst=certain, bound=args.epsilon)  # fmt: skip

    # A final step that ignored the bound of 3 rows per user would show a loss of ln((1+e^3)/2) ~ 2.3.
    wrong = log_ratio_lower_bound(
        frequencies(args, family, d, sensitivity=1.0), frequencies(args, family, d_prime, sensitivity=1.0)
    )
    assert wrong[1] > args.epsilon
