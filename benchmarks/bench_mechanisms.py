"""Time per draw of the exact mechanisms beside a float numpy Gumbel-max (and OpenDP, if installed).

    python -m benchmarks.bench_mechanisms [--sizes 10,1000,100000,1000000]

Every row runs in this process on the same scores: ours (exact, OS randomness), the plain float
numpy Gumbel-max argmax(scores * eps / 2 + rng.gumbel(size=C)) (inexact, not private: the speed
baseline), and OpenDP's exact make_noisy_max with Gumbel noise when opendp is importable.
"exact step" is the share of our draws whose float screen left a decision to exact arithmetic.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from beam_expmech.mechanisms import exact, exponential_mechanism, top_k

EPSILON = 1.0


def per_draw(draw, min_seconds: float = 1.0, max_reps: int = 50) -> float:
    """Mean seconds per call, after one warm-up call."""
    draw()
    reps, start = 0, time.perf_counter()
    while reps < max_reps and (reps < 3 or time.perf_counter() - start < min_seconds):
        draw()
        reps += 1
    return (time.perf_counter() - start) / reps


def exact_step_share(scores: np.ndarray, draws: int) -> float:
    """The share of draws that reach exact arithmetic (counted by wrapping the decision step)."""
    decide, calls = exact.decide, []

    def counting(*args, **kwargs):
        calls.append(1)
        return decide(*args, **kwargs)

    exact.decide = counting
    try:
        for _ in range(draws):
            exponential_mechanism(scores, epsilon=EPSILON, sensitivity=1)
    finally:
        exact.decide = decide
    return len(calls) / draws


def opendp_noisy_max():
    """OpenDP's exact report-noisy-max with Gumbel noise (the exponential mechanism), or None."""
    try:
        import opendp.prelude as dp
    except ImportError:
        return None
    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=int)), dp.linf_distance(T=int)
    return space >> dp.m.then_noisy_max(dp.zero_concentrated_divergence(), scale=2.0 / EPSILON)


def row(scores: np.ndarray, rng: np.random.Generator, opendp) -> str:
    size = scores.size
    ours = per_draw(lambda: exponential_mechanism(scores, epsilon=EPSILON, sensitivity=1))
    ours_top = per_draw(lambda: top_k(scores, min(10, size), epsilon=EPSILON, sensitivity=1))
    baseline = per_draw(lambda: np.argmax(scores * (EPSILON / 2) + rng.gumbel(size=size)))
    share = exact_step_share(scores, draws=200 if size <= 100_000 else 30)
    if opendp is not None:
        as_list = scores.tolist()
        theirs = per_draw(lambda: opendp(as_list), min_seconds=2.0, max_reps=20)
        other = f"{theirs * 1e3:>10.2f} {theirs / ours:>11.1f}x"
    else:
        other = f"{'n/a':>10} {'n/a':>12}"
    return (
        f"{size:>9,} {ours * 1e3:>12.3f} {ours_top * 1e3:>16.3f} {baseline * 1e3:>15.3f} "
        f"{ours / baseline:>8.2f}x {ours_top / baseline:>11.2f}x {share:>10.1%} {other}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1000,100000,1000000")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    opendp = opendp_noisy_max()
    header = (
        f"{'C':>9} {'exact EM ms':>12} {'exact top-10 ms':>16} {'numpy float ms':>15} {'EM/numpy':>9} "
        f"{'top10/numpy':>12} {'exact step':>11} {'OpenDP ms':>10} {'OpenDP/ours':>12}"
    )
    print(header)
    print("-" * len(header))
    for size in (int(s) for s in args.sizes.split(",")):
        print(row(rng.integers(0, 1000, size=size), rng, opendp))  # counts: many ties near the top
    if opendp is None:
        print("(OpenDP not installed: `make bench` installs it)")


if __name__ == "__main__":
    main()
