"""Runs Private-PGM's own MST, AIM or MargNet once, under Private-PGM's interpreter (launched by
benchmarks.private_pgm).

    PGM_PYTHON benchmarks/private_pgm_runner.py --source PGM_SOURCE --method mst|aim|margnet --epsilon E --delta D
        --rho RHO --seed S --rows N [--rounds T] [--max-model-size MB] IN.npz OUT.npz

IN.npz: ``codes`` (rows x columns, int64), ``names`` and ``sizes`` (the domain, in column order). OUT.npz: ``rows``
(N rows drawn from the fitted model, as ``codes``), ``cliques`` (JSON: each factor's columns) with ``factor_<i>``
(its log-potential, axes in those columns' order, on the original codes), ``mixture`` for MargNet instead (its
model: a mixture of product distributions, one a row, each column's probabilities side by side), and ``info``
(JSON: seconds and counts).

This file imports nothing of beam-expmech: only numpy and Private-PGM, from PGM_SOURCE (its ``src`` for ``mbi``, its
``mechanisms`` for ``mst``, ``aim``, ``margnet`` and their own ``from mechanism import Mechanism``), put first on
sys.path so that the ``mbi`` of that same source tree is the one imported. What their mechanisms print goes to this
process's stderr as they print it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import sys
import time
import types
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, type=Path, help="Private-PGM's source tree")
    parser.add_argument("--method", required=True, choices=["mst", "aim", "margnet"])
    parser.add_argument("--epsilon", required=True, type=float)
    parser.add_argument("--delta", required=True, type=float)
    parser.add_argument("--rho", required=True, type=float, help="the zCDP budget the mechanism spends, exactly")
    parser.add_argument("--seed", required=True, type=int, help="numpy's global generator (their noise and sampling)")
    parser.add_argument("--rows", required=True, type=int, help="how many rows to draw from the fitted model")
    parser.add_argument("--rounds", type=int, default=None, help="AIM's T (default: theirs, 16 d)")
    parser.add_argument("--max-model-size", type=float, default=80.0, help="AIM's max_model_size in MB (theirs: 80)")
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    args = parser.parse_args()
    sys.path[:0] = [str(args.source / "src"), str(args.source / "mechanisms")]

    import pandas as pd
    from mbi import Dataset, Domain

    stored = np.load(args.input)
    names, sizes = [str(n) for n in stored["names"]], [int(s) for s in stored["sizes"]]
    data = Dataset(pd.DataFrame(stored["codes"], columns=names), Domain(names, sizes))
    np.random.seed(args.seed)  # their noise, their exponential mechanism and mbi's sampling all draw from it
    printed = _Passed()
    start = time.perf_counter()
    with contextlib.redirect_stdout(printed):
        fit = {"mst": run_mst, "aim": run_aim, "margnet": run_margnet}[args.method](data, args)
    fitted = time.perf_counter()
    rows = fit.sample(args.rows)
    info = {
        "fit seconds": fitted - start,
        "sample seconds": time.perf_counter() - fitted,
        "cliques": [list(c) for c in fit.cliques()],
    }
    if args.method == "aim":
        info["rounds measured"] = printed.getvalue().count("Measuring Clique")
        info["sigma halved"] = printed.getvalue().count("Reducing sigma")
    if args.method == "margnet":
        info["rounds measured"] = printed.getvalue().count("selected marginal:")
        info["noise lowered"] = printed.getvalue().count("sigma updated")
    factors = fit.factors()
    np.savez(
        args.output,
        rows=np.column_stack([rows[c] for c in names]).astype(np.int64),
        cliques=np.array(json.dumps([list(c) for c, _ in factors])),
        info=np.array(json.dumps(info)),
        **{f"factor_{i}": values for i, (_, values) in enumerate(factors)},
        **({"mixture": fit.mixture} if isinstance(fit, MixtureFit) else {}),
    )


class _Passed(io.StringIO):
    """What a mechanism prints: kept, and passed on to stderr as it comes (a run stopped at the benches' time cap
    leaves there how far it got)."""

    def write(self, text: str) -> int:
        sys.stderr.write(text)
        sys.stderr.flush()
        return super().write(text)


class Fit:
    """A fitted mbi MarkovRandomField, on the original codes or on MST's compressed ones (``supports``: for each
    column, which original codes kept a code of their own; the rest share the last code)."""

    def __init__(self, model, supports: dict[str, np.ndarray] | None = None) -> None:
        self.model = model
        self.supports = supports or {}
        self.compressed = {c: s for c, s in self.supports.items() if not s.all()}

    def cliques(self) -> list[tuple[str, ...]]:
        return [tuple(c) for c in self.model.cliques]

    def factors(self) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """The model's log-potentials on the original codes. A compressed column's codes index its compressed
        code (the rare ones all the shared last code), and a 1-way factor of -log(rare codes) on the rare ones
        splits the shared code's mass evenly among them: the distribution MST's ``reverse_data`` draws from."""
        factors = []
        for factor in self.model.potentials.arrays.values():
            columns = tuple(factor.domain.attributes)
            values = np.asarray(factor.values, dtype=np.float64)
            index = [self._compressed_code(c) for c in columns]
            factors.append((columns, values[np.ix_(*index)]))
        for column, support in self.compressed.items():
            factors.append(((column,), np.where(support, 0.0, -np.log(np.count_nonzero(~support)))))
        return factors

    def _compressed_code(self, column: str) -> np.ndarray:
        """Each original code's index on the model's axis of ``column``."""
        support = self.compressed.get(column)
        if support is None:
            return np.arange(self.model.domain[column])
        return np.where(support, np.cumsum(support) - 1, np.count_nonzero(support))

    def sample(self, rows: int) -> dict[str, np.ndarray]:
        """``rows`` rows, i.i.d. from the model: mbi's ``synthetic_data(rows, method="sample")`` (its default
        "round" assigns values by row order within each parent group), then MST's own ``reverse_data`` for the
        compressed columns (a shared code drawn uniformly among its rare codes)."""
        data = self.model.synthetic_data(rows, method="sample")
        if self.supports:
            import mst

            data = mst.reverse_data(data, self.supports)
        return {c: data.df[c].to_numpy() for c in data.domain.attrs}


def run_mst(data, args: argparse.Namespace) -> Fit:
    """mechanisms/mst.py's ``MST(data, epsilon, delta)``, unmodified but for three of its module's names: its
    ``cdp_rho`` returns our rho (so its budget is exactly ours), and ``estimation.mirror_descent`` and
    ``transform_data`` are wrapped to keep the last model fitted (the final one) and the supports of its
    compressed domain, which MST itself does not return. Its own rows (rounded, as many as the noisy total) are
    dropped; ``Fit.sample`` draws ours from the kept model."""
    import mst
    from mbi import estimation

    transform = mst.transform_data
    models: list = []
    supports: dict[str, np.ndarray] = {}

    def mirror_descent(*positional, **named):
        models.append(estimation.mirror_descent(*positional, **named))
        return models[-1]

    def transform_data(data, kept):
        supports.update({c: np.asarray(s, dtype=bool) for c, s in kept.items()})
        return transform(data, kept)

    mst.cdp_rho = lambda epsilon, delta: args.rho
    mst.estimation = types.SimpleNamespace(mirror_descent=mirror_descent)
    mst.transform_data = transform_data
    mst.MST(data, args.epsilon, args.delta)
    return Fit(models[-1], supports)


def run_aim(data, args: argparse.Namespace) -> Fit:
    """mechanisms/aim.py's ``AIM(epsilon, delta, rounds=T, max_model_size=MB).run(data, workload)``, its ``rho``
    set to ours after construction (its constructor converts (epsilon, delta) with cdp2adp.cdp_rho, a tighter
    conversion than ours); the workload every 3-way marginal, weight 1 (OpenDP's AIM's default, queries=3). Its
    own rows (rounded; asking for one row only can fail there, on NaN) are dropped: ``Fit.sample`` draws ours
    from its model."""
    import aim

    mechanism = aim.AIM(args.epsilon, args.delta, rounds=args.rounds, max_model_size=args.max_model_size)
    mechanism.rho = args.rho
    workload = [(clique, 1.0) for clique in itertools.combinations(data.domain.attrs, 3)]
    model, _ = mechanism.run(data, workload, num_synth_rows=args.rows)
    return Fit(model)


class MixtureFit:
    """MargNet's fitted generator (mbi's ``MargNN``): its network maps each of a fixed batch of inputs to a product
    distribution over the columns, and the model is their mixture, equal weights (what its ``sample`` draws from and
    its ``obtain_sample_marginals`` sums)."""

    def __init__(self, network) -> None:
        self.network = network
        output = network.model.apply(
            {"params": network.params, "batch_stats": network.batch_stats}, network.uniform_sample(), train=False
        )
        self.mixture = np.exp(np.asarray(network.predict_x(output), dtype=np.float64))

    def cliques(self) -> list[tuple[str, ...]]:
        return []

    def factors(self) -> list[tuple[tuple[str, ...], np.ndarray]]:
        return []

    def sample(self, rows: int) -> dict[str, np.ndarray]:
        """``rows`` rows from the mixture (``MargNN.sample``: a component, then each column from it)."""
        codes = np.asarray(self.network.sample(rows))
        return {c: codes[:, i] for i, c in enumerate(self.network.column_names)}


MARGNET_FIXES = {  # margnet.py at b2f2b81: (its line, as run here)
    # The 1-ways' loop charges each of them d times over: the run would end with most of rho unspent.
    "            rho_used += measure_rho * len(one_way_marginals)\n": "            rho_used += measure_rho\n",
    # Imported and never used (the network is mbi's MargNN, in JAX): not installed in Private-PGM's venv.
    "import torch\n": "",
    "import tomli\n": "",
}


def run_margnet(data, args: argparse.Namespace) -> MixtureFit:
    """MargNet (Chen, Gong and Wang 2025), Private-PGM's pull request #48: ``mechanisms/margnet.py`` at b2f2b81,
    ``MargDLGen(epsilon, delta, data, domain).fit_adaptive()``, its ``rho`` set to ours, its network seeded with
    ``--seed`` (``MargNN(domain, seed=...)``; theirs is 0 for every run). The module is loaded from its file with the
    lines of ``MARGNET_FIXES`` replaced (each must be found exactly once): its 1-way charge (issue 38's note: the
    bug costs it only accuracy, and a fair reference spends all of rho) and two unused imports. Its workload is its
    own (every 2-way marginal to choose from); its rows are drawn from its mixture (``MixtureFit.sample``)."""
    source = (args.source / "mechanisms" / "margnet.py").read_text()
    for line, fixed in MARGNET_FIXES.items():
        if source.count(line) != 1:
            raise SystemExit(f"margnet.py: expected the line {line.strip()!r} once (the tree at b2f2b81)")
        source = source.replace(line, fixed)
    margnet = types.ModuleType("margnet")
    margnet.__file__ = str(args.source / "mechanisms" / "margnet.py")
    exec(compile(source, margnet.__file__, "exec"), margnet.__dict__)
    from mbi import MargNN

    generator = margnet.MargDLGen(epsilon=args.epsilon, delta=args.delta, dataset=data, domain=data.domain)
    generator.rho = args.rho
    generator.model = MargNN(domain=data.domain.config, seed=args.seed)
    generator.fit_adaptive()
    return MixtureFit(generator.model)


if __name__ == "__main__":
    main()
