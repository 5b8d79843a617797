"""The final step of private synthetic data: a generator over the workload's summed counts, then rows.

col: one int64 vector of every workload cell (what ``PredicateCounts(step.family) | GatherCounts``
emits) -> col: one (columns, details): the synthetic columns as integer codes (numbers, for a column
with a public ``NumericGrid``), and the generator's public details (rows drawn, marginals measured),
both mechanism outputs.

The generator touches the counts only through mechanisms: by default AIM or independent 1-way marginals, as a
private count of the rows chooses ((epsilon, delta)-DP, ``synth.choice``), or AIM (rho-zCDP, rho the most that
fits (epsilon, delta)), MWEM or BLR (pure epsilon-DP); the rows are sampled from its model and moved
towards its answers on the workload (``row_fitting``), and the number of a numeric column drawn
uniformly inside each drawn bin (``numbers_in_bins``): post-processing, with the run's randomness
(the OS CSPRNG but in tests). Every check the generator makes of its public parameters (the size
of a marginal, the memory the run will need) runs in ``__init__``, before any budget is spent.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import apache_beam as beam
import numpy as np

from beam_expmech import parameters
from beam_expmech.accounting import Release, ZcdpShare, zcdp_beside
from beam_expmech.grids import NumericGrid
from beam_expmech.io import writers
from beam_expmech.mechanisms.randomness import RandomSource, random_source
from beam_expmech.predicates import MarginalWorkload
from beam_expmech.synth import MAX_MEMORY, Progress, aim, blr, choice, mwem, row_fitting
from beam_expmech.synth.row_fitting import synthetic_rows
from beam_expmech.transforms import lineage

METHODS = ("auto", "aim", "mwem", "blr")
APPROXIMATE = ("auto", "aim")  # (epsilon, delta)-DP: they need a delta; mwem and blr are pure
MAX_WORKLOAD_CELLS = 50_000_000  # the summed counts of every marginal, held by one worker
DEFAULT_MAX_SYNTHETIC_ROWS = 10_000_000
"""Without ``rows``, the most rows drawn (the noisy size is capped at it), or fewer where those would not fit
in ``MAX_MEMORY`` beside the generator: a public maximum, so the cap is post-processing."""
NUMBERS_ROW_BYTES = 160  # numbers_in_bins' working arrays, a row of one column (about 14 words measured)


def numbers_in_bins(grid: NumericGrid, codes: np.ndarray, *, source: RandomSource) -> np.ndarray:
    """A number drawn uniformly inside each code's bin of ``grid``, vectorised: for an integer grid a uniform
    integer among the bin's (int64, always within [lower, upper]), else a uniform float in the bin (float64)
    that ``grid.codes`` puts back in the same bin.

    Privacy: post-processing of the codes (a private release) with randomness independent of the data, so
    it costs no budget; ``source`` is the OS CSPRNG but in tests.
    """
    codes = np.asarray(codes, dtype=np.int64)
    if codes.size and (codes.min() < 0 or codes.max() >= grid.bins):
        raise ValueError(f"codes must lie in [0, {grid.bins})")
    if grid.integer:
        first, last = grid.integer_ranges
        low = first[codes]
        return low + source.integers_below(last[codes] - low + 1)
    low, high = grid.edges[codes], grid.edges[codes + 1]
    values = low + source.unit_floats(codes.size) * (high - low)
    # Rounding may carry a draw onto its bin's upper edge: the next bin's, but for the last (closed) bin.
    top = np.where(codes == grid.bins - 1, high, np.nextafter(high, -np.inf))
    return np.clip(values, low, top)


class PrivateSynthesis(beam.PTransform):
    """Synthetic rows; ``max_rows`` checked against the bounding above if marked, else trusted.

    Rows over ``domain`` ({column: number of codes}) that answer its k-way marginals privately. Where the counts
    carry no bounding's mark (made by hand) it cannot tell a ``max_rows`` too small; ``PrivateRelease`` derives it.

    Privacy: ``aim`` is rho-zCDP with rho the most that leaves the run (``epsilon``, ``delta``)-DP
    beside ``elsewhere``, the run's other releases (such as private bin edges): by the better of zCDP
    and basic composition (``accounting.zcdp_beside``: ``share`` says which, ``cost`` is what that
    route charges); ``auto`` (the default) is (``epsilon``, ``delta``)-DP: AIM or independent 1-way
    marginals, as a private count of the rows chooses (``synth.choice``; with a ``target`` column, the target's
    2-way marginals, naive Bayes, in place of the 1-ways); ``mwem`` and ``blr`` are pure ``epsilon``-DP
    (``cost``), when each privacy unit has at most ``max_rows`` = K rows: every cell of the
    workload (``family``, which the data pass must count) then moves by at most K. ``degree``:
    the k of the k-way marginals (aim, mwem; default 3, or every column if fewer); blr counts the
    full-domain histogram and needs ``rows``.
    ``grids``: the public grid of each numeric column (its domain size is the grid's bins): the
    column's codes become numbers drawn inside their bins (``numbers_in_bins``, post-processing).
    Without ``rows``, the rows drawn are the generator's noisy size (a release), capped at
    ``max_synthetic_rows`` (default: ``DEFAULT_MAX_SYNTHETIC_ROWS`` or the most that fit), a public
    maximum: post-processing. ``memory``: the bytes the step holds at most, for those rows: the
    generator's, its rows' (``row_fitting.memory_bound``) and the release's, written in chunks where it
    is drawn; over ``MAX_MEMORY`` it is refused when built, before any budget is spent.
    ``seed`` is for tests only (not private).
    """

    def __init__(
        self,
        *,
        method: str = "auto",
        domain: dict[str, int],
        epsilon: float,
        delta: float = 0.0,
        degree: int | None = None,
        rows: int | None = None,
        max_synthetic_rows: int | None = None,
        rounds: int | None = None,
        max_rows: int = 1,
        grids: dict[str, NumericGrid] | None = None,
        elsewhere: Sequence[Release] = (),
        target: str | None = None,
        seed: int | None = None,
        progress: Progress | None = None,
    ):
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        if not domain:
            raise ValueError("the domain has no column")
        self.method, self.domain = method, dict(domain)
        self.grids = dict(grids or {})
        for column, grid in self.grids.items():
            if not isinstance(grid, NumericGrid):
                raise ValueError(f"the grid of column {column!r} must be a NumericGrid, got {type(grid).__name__}")
            if self.domain.get(column) != grid.bins:
                raise ValueError(f"column {column!r} has a grid of {grid.bins} bins, so its domain size must be that")
        self.epsilon = parameters.positive_finite(epsilon, "epsilon")
        self.delta = parameters.probability(delta, "delta") if method in APPROXIMATE else 0.0
        self.max_rows = parameters.count(max_rows, "max_rows")
        self.rows = None if rows is None else parameters.count(rows, "rows")
        self.rounds = None if rounds is None else parameters.count(rounds, "rounds")
        self.seed, self.progress = parameters.test_seed(seed), progress
        if elsewhere and method != "aim":
            raise ValueError("elsewhere is for aim (auto, mwem and blr take what is left of epsilon)")
        if target is not None and method != "auto":
            raise ValueError(f"target is for auto (its small-data path): {method} would not read it")
        self.target = target
        self.share: ZcdpShare | None = None
        self.chooser: Release | None = None  # auto's (epsilon, delta)-DP charge
        if method == "aim":
            self.share = zcdp_beside(self.epsilon, self.delta, list(elsewhere), "synthetic data by aim")
        elif method == "auto":
            self.chooser = Release.approximate(self.epsilon, self.delta, "synthetic data by auto")
            choice.check_parameters(self.domain, epsilon=self.epsilon, delta=self.delta, max_rows=self.max_rows,
                                    target=target)  # fmt: skip
        if max_synthetic_rows is not None and self.rows is not None:
            raise ValueError("max_synthetic_rows caps the noisy size, drawn only without rows")
        columns = list(self.domain)
        if method == "blr":
            if self.rows is None:
                raise ValueError("blr needs rows: the synthetic dataset's size")
            generator = blr.check_parameters(list(self.domain.values()), rows=self.rows, max_rows=self.max_rows)
            self.family = MarginalWorkload([tuple(columns)], self.domain)

            def rows_bytes(rows: int) -> int:
                return 0  # blr.check_parameters counts its rows

        else:
            degree = min(3, len(columns)) if degree is None else degree
            degree = parameters.count(degree, "degree", at_most=len(columns), of="columns")
            if target is not None and degree < 2:  # else its small-data path would fail after the charge
                raise ValueError("a target needs a workload of degree 2 or more: its 2-way marginals are counted")
            self.family = MarginalWorkload(list(itertools.combinations(columns, degree)), self.domain)
            if self.family.num_candidates > MAX_WORKLOAD_CELLS:
                raise ValueError(
                    f"the {degree}-way marginals have {self.family.num_candidates:,} cells: too many to hold"
                )
            check = mwem.check_parameters if method == "mwem" else aim.check_parameters  # auto: AIM the larger
            if method == "mwem":
                self.rounds = self.rounds or mwem.DEFAULT_ROUNDS
            generator = check(self.domain, self.family.marginals, rounds=self.rounds, max_rows=self.max_rows)
            rows_bytes = row_fitting.memory_bound(self.domain, self.family.marginals)

        def needed(rows: int) -> int:
            return generator + rows_bytes(rows) + self._release_bytes(rows)

        self.max_synthetic_rows = None
        if self.rows is None and max_synthetic_rows is not None:
            self.max_synthetic_rows = parameters.count(max_synthetic_rows, "max_synthetic_rows")
        elif self.rows is None:
            self.max_synthetic_rows = _most(lambda rows: needed(rows) <= MAX_MEMORY, DEFAULT_MAX_SYNTHETIC_ROWS)
        drawn = self.rows or self.max_synthetic_rows
        self.memory = needed(drawn)
        if self.memory > MAX_MEMORY:
            raise ValueError(
                f"{method}: {drawn:,} synthetic rows of {len(columns)} columns would hold about "
                f"{self.memory / 2**30:,.1f} GiB with the generator, over the limit of {MAX_MEMORY / 2**30:g} GiB: "
                "draw fewer rows"
            )

    def _release_bytes(self, rows: int) -> int:
        """What the release of ``rows`` rows holds at most beside its generator and the rows' search (whose table of
        codes it keeps): each numeric column's numbers (8 bytes a row) and, one column at a time,
        ``numbers_in_bins``' working arrays; then the buffers of a write of the table a chunk of rows at a time,
        in the same step (``writers.write_table_atomically``, as ``pipelines.synthesize`` writes it). A pipeline
        that hands the table to another stage holds what its runner copies on the way besides."""
        numbers = rows * (8 * len(self.grids) + (NUMBERS_ROW_BYTES if self.grids else 0))
        return numbers + writers.TABLE_WRITER_BYTES

    @property
    def rho(self) -> float:
        """AIM's zCDP budget: the most that leaves the run (epsilon, delta)-DP beside ``elsewhere``."""
        if self.share is None:
            raise ValueError(f"{self.method} is pure epsilon-DP: it has no rho budget")
        return self.share.rho

    @property
    def cost(self) -> Release:
        """What the release costs: for aim, rho-zCDP, or the (epsilon less the others', delta)-DP release that its
        rho implies where basic composition leaves it more (``share``; charged to a budget with delta > 0); for
        auto, the (epsilon less the others', delta)-DP release (``chooser``); pure epsilon otherwise."""
        if self.share is not None:
            return self.share.release
        if self.chooser is not None:
            return self.chooser
        return Release.pure(self.epsilon, f"synthetic data by {self.method}")

    def synthesize(self, counts: np.ndarray) -> tuple[dict[str, np.ndarray], dict]:
        """What ``expand`` draws, in one process: (synthetic columns of codes, the generator's public details)."""
        counts = np.asarray(counts)
        if counts.shape != (self.family.num_candidates,):
            raise ValueError(f"expected the {self.family.num_candidates:,} counts of this step's family, got shape "
                             f"{counts.shape}")  # fmt: skip
        columns = list(self.domain)
        if self.method == "blr":
            sizes = list(self.domain.values())
            histogram = blr.blr_synthesize(
                counts, sizes, rows=self.rows, epsilon=self.epsilon, max_rows=self.max_rows, rng=self.seed
            )
            codes = blr.histogram_to_rows(histogram, sizes)
            source = random_source(None if self.seed is None else self.seed + 1)
            return self._numbers({c: codes[:, i] for i, c in enumerate(columns)}, source), {"rows": self.rows}
        workload = self.family.split(counts)
        if self.method == "aim":
            result = aim.aim(workload, self.domain, rho=self.rho, rounds=self.rounds, max_rows=self.max_rows,
                             ordered=self.grids.keys(), rng=self.seed, progress=self.progress)  # fmt: skip
            details = {}
        elif self.method == "auto":
            result = choice.aim_or_independent(workload, self.domain, epsilon=self.epsilon, delta=self.delta,
                                               max_rows=self.max_rows, target=self.target, rounds=self.rounds,
                                               ordered=self.grids.keys(), rng=self.seed,
                                               progress=self.progress)  # fmt: skip
            details = {"generator": result.generator}  # chosen by a released count: post-processing
        else:
            result = mwem.mwem(workload, self.domain, epsilon=self.epsilon, rounds=self.rounds, max_rows=self.max_rows,
                               rng=self.seed, progress=self.progress)  # fmt: skip
            # The rounds run: MWEM runs fewer than asked where the noisy size cannot carry them (post-processing)
            details = {"rounds": len(result.measured), "rounds_asked": self.rounds}
        rows = self.rows or min(result.rows, self.max_synthetic_rows)  # a public cap on a released size
        source = random_source(None if self.seed is None else self.seed + 1)
        codes = synthetic_rows(result.model, self.domain, self.family.marginals, rows, source=source,
                               progress=self.progress)  # fmt: skip
        if self.rows is None:
            details["max_synthetic_rows"] = self.max_synthetic_rows
        return self._numbers(codes, source), details | {"rows": rows, "measured": [list(m) for m in result.measured]}

    def _numbers(self, table: dict[str, np.ndarray], source: RandomSource) -> dict[str, np.ndarray]:
        """The synthetic codes, with each numeric column's drawn inside its bins (post-processing)."""
        return {c: numbers_in_bins(self.grids[c], v, source=source) if c in self.grids else v for c, v in table.items()}

    def expand(self, counts):
        lineage.check_sensitivity(counts, self.max_rows, "PrivateSynthesis", self.family)  # a cell of each: K a unit
        # col: one vector of every workload cell -> col: one (columns, details)
        return counts | "Synthesize" >> beam.Map(self.synthesize)


def _most(fits: Callable[[int], bool], most: int) -> int:
    """The largest n from 1 to ``most`` with ``fits(n)`` (true up to some n, false beyond: memory grows with
    rows), by bisection; 1 where none fits (the memory check then refuses it)."""
    if fits(most):
        return most
    low, high = 1, most  # fits(high) is false
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
