"""A graphical model fitted to noisy marginals: the estimation step of AIM (as in Private-PGM).

Post-processing only: the model sees noisy measurements and public parameters, never data.

The model is a Markov random field, p(x) proportional to exp(sum_C theta_C(x_C)), over the
maximal cliques C of a junction tree built from the measured column sets. ``fit`` minimises
    sum over measurements m of ||N p_m - y_m||^2 / (2 sigma_m^2)
(each value's term divided by the number of noisy cells it sums, where it sums several)
(p_m the model's marginal on m's columns, y_m the noisy counts, N the public total) by entropic
mirror descent on the log-potentials theta (McKenna, Sheldon, Miklau 2019), with a backtracking
step, until a step cap or until its steps gain under a tolerance in nats; belief propagation in
log space gives the clique marginals (as probabilities) at each step. ``project`` answers any
marginal from those calibrated clique marginals, exactly up to float rounding. Speed here never
touches privacy: AIM's scores round these projections to exact integers, and what it spends is
fixed by its mechanisms alone.

Every array is laid out with its columns in the domain's order, so aligning two factors is a
reshape, never a transpose.
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from beam_expmech import parameters
from beam_expmech.mechanisms.randomness import RandomSource
from beam_expmech.synth.sampling import allocate, cells_of, split_cells

Columns = tuple[str, ...]
_WINDOW = 10  # steps over which fit's stopping rule averages the loss's decrease
_EINSUM_LABELS = 52  # np.einsum's limit on distinct axes
_SMALLEST_SUM = 2.0**-500  # of a slice of a message's exponentiated belief, shifted by the clique's top


@dataclass(frozen=True)
class Measurement:
    """Noisy counts ``values`` of the marginal on ``columns`` (domain order), noise scale ``sigma``.

    ``summed`` (values' shape): how many independently noisy cells each value sums (its variance is
    that times sigma^2), where a measurement was added up onto fewer cells; None: one each.
    """

    columns: Columns
    values: np.ndarray
    sigma: float
    summed: np.ndarray | None = None

    def weights(self) -> float | np.ndarray:
        """The inverse variance of each value."""
        return 1.0 / self.sigma**2 if self.summed is None else 1.0 / (self.sigma**2 * self.summed)

    def noisy_cells(self) -> int:
        """How many independently noisy cells the values sum: their total's variance is that times sigma^2."""
        return self.values.size if self.summed is None else int(self.summed.sum())


def junction_tree(domain: dict[str, int], column_sets: Sequence[Sequence[str]]) -> tuple[list[Columns], list]:
    """The maximal cliques of a triangulation of the graph joining every set's columns, and a tree over them.

    Triangulation by greedy elimination (the column whose elimination clique has the fewest
    cells first); the tree is a maximum spanning tree on separator size, so it has the
    running-intersection property. Every input set lies inside some clique.
    """
    order = {c: i for i, c in enumerate(domain)}
    neighbours = {c: set() for c in domain}
    for columns in column_sets:
        for a, b in itertools.combinations(columns, 2):
            neighbours[a].add(b)
            neighbours[b].add(a)
    remaining, found = set(domain), []
    while remaining:
        column = min(
            remaining, key=lambda c: (math.prod(domain[n] for n in neighbours[c] & remaining) * domain[c], order[c])
        )
        clique = (neighbours[column] & remaining) | {column}
        for a, b in itertools.combinations(clique, 2):
            neighbours[a].add(b)
            neighbours[b].add(a)
        found.append(frozenset(clique))
        remaining.remove(column)
    maximal = list(dict.fromkeys(c for c in found if not any(c < other for other in found)))
    cliques = [tuple(sorted(c, key=order.__getitem__)) for c in maximal]
    # Kruskal on -|separator|; disconnected parts stay separate trees (a forest).
    pairs = sorted(
        ((i, j) for i, j in itertools.combinations(range(len(cliques)), 2) if maximal[i] & maximal[j]),
        key=lambda e: -len(maximal[e[0]] & maximal[e[1]]),
    )
    root = list(range(len(cliques)))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    edges = []
    for i, j in pairs:
        if find(i) != find(j):
            root[find(i)] = find(j)
            edges.append((i, j))
    return cliques, edges


def model_cells(domain: dict[str, int], column_sets: Sequence[Sequence[str]]) -> int:
    """Cells of the model over ``column_sets``: the sum of its cliques' sizes."""
    cliques, _ = junction_tree(domain, column_sets)
    return sum(math.prod(domain[c] for c in clique) for clique in cliques)


@dataclass(frozen=True)
class _Term:
    """One column set in the fit: its measurements' weighted mean ``target`` (None: a partial sum that
    only others are summed from) and where it is summed from.

    ``source`` is the term (listed before it) whose marginal holds it, or None for its clique
    ``holder``; ``axes`` are the source's axes it sums out, ``inside`` its shape within the source.
    """

    columns: Columns
    holder: int
    source: int | None
    axes: tuple[int, ...]
    inside: tuple[int, ...]
    weight: float | np.ndarray | None  # one per value where the values' variances differ
    target: np.ndarray | None


class GraphicalModel:
    """A Markov random field on a junction tree, its total, and its calibrated clique marginals.

    ``marginals`` holds each clique's marginal as probabilities (domain order); every projection
    is computed from them, and the sums that projections share are kept until they change.
    """

    def __init__(self, domain: dict[str, int], column_sets: Sequence[Sequence[str]], total: float = 1.0):
        self.domain = dict(domain)
        self.total = float(total)
        self.cliques, self.edges = junction_tree(self.domain, column_sets)
        self._sets = [frozenset(c) for c in self.cliques]
        self._adjacent: dict[int, set[int]] = {i: set() for i in range(len(self.cliques))}
        for i, j in self.edges:
            self._adjacent[i].add(j)
            self._adjacent[j].add(i)
        self.potentials = [np.zeros(self._shape(c)) for c in self.cliques]
        self._step: float | None = None  # the mirror descent's last step size
        self._schedule = self._message_schedule()
        self._children: list[list[int]] = [[] for _ in self.cliques]
        for child, parent in self._schedule:
            self._children[parent].append(child)
        children = {child for child, _ in self._schedule}
        self._top_down = [i for i in range(len(self.cliques)) if i not in children]
        self._top_down += [child for child, _ in reversed(self._schedule)]  # every parent before its children
        self._plans: dict[Columns, tuple] = {}  # _eliminate's plans: the tree's alone, so kept for good
        self.marginals = self._calibrate(self.potentials)

    @property
    def cells(self) -> int:
        """The cells of its cliques, summed (what a step of ``fit`` passes over, a few dozen times)."""
        return sum(p.size for p in self.potentials)

    @property
    def marginals(self) -> list[np.ndarray]:
        """Each clique's calibrated marginal, as probabilities."""
        return self._marginals

    @marginals.setter
    def marginals(self, marginals: list[np.ndarray]) -> None:
        self._marginals = marginals
        self._sums: dict[tuple[int, Columns], np.ndarray] = {}  # (clique, columns) -> its marginal on them
        self._sum_cells = 0
        self._inverses: dict[tuple[int, int], np.ndarray] = {}  # tree edge -> 1 / its separator's marginal
        self._joins: dict[tuple, np.ndarray] = {}  # _contract's steps, by how they were made
        self._join_cells = 0

    # -- structure --------------------------------------------------------------------
    def _shape(self, columns: Sequence[str]) -> tuple[int, ...]:
        return tuple(self.domain[c] for c in columns)

    def _ordered(self, columns: Sequence[str]) -> Columns:
        return tuple(c for c in self.domain if c in columns)

    def _aligned(self, array: np.ndarray, columns: Columns, target: Columns) -> np.ndarray:
        """``array`` over ``columns`` reshaped to broadcast against ``target`` (columns a subset, same order)."""
        return array.reshape([self.domain[c] if c in columns else 1 for c in target])

    def clique_holding(self, columns: Sequence[str]) -> int | None:
        wanted = set(columns)
        return next((i for i, c in enumerate(self._sets) if wanted <= c), None)

    def _message_schedule(self) -> list[tuple[int, int]]:
        """(child, parent) pairs, leaves first, over every tree of the forest.

        Each tree's root is its largest clique: the root sends no message up, so the largest
        belief is exponentiated once a calibration instead of twice.
        """
        seen, downward = set(), []
        for start in sorted(range(len(self.cliques)), key=lambda i: (-math.prod(self._shape(self.cliques[i])), i)):
            if start in seen:
                continue
            seen.add(start)
            frontier = [start]
            while frontier:
                parent = frontier.pop(0)
                for child in sorted(self._adjacent[parent]):
                    if child not in seen:
                        seen.add(child)
                        downward.append((child, parent))
                        frontier.append(child)
        return downward[::-1]

    # -- inference --------------------------------------------------------------------
    def _calibrate(self, potentials: list[np.ndarray]) -> list[np.ndarray]:
        """Every clique's marginal, as probabilities (belief propagation in log space, two passes).

        Upward, each clique sends the log-sum-exp of its belief over the columns its parent lacks:
        its belief less a shift, exponentiated (``scaled``), summed over each separator slice. The
        shift is the belief's largest value, unless a slice's sum then falls under ``_SMALLEST_SUM``
        (its cells far below the clique's largest): then each slice's own largest, as a message
        from a clique with extreme potentials needs. Downward, a clique's marginal is that same
        array times a factor per separator cell (the parent's message and the shift, exponentiated:
        separator-sized), normalised by the factor times the slices' sums kept from the way up
        (separator-sized too): one exp and one product over each clique's cells a calibration. A
        child's message is its marginal summed onto their separator, over the message the child
        sent up, in logs. Each slice's largest scaled value is at least ``_SMALLEST_SUM`` over its
        cells, so a cell underflows only below 2^-490 of its slice's largest (2^31 cells at most),
        hence of the clique's largest: a probability under 2^-490 to every count the model gives.
        """
        up: list[np.ndarray | None] = [None] * len(self.cliques)  # i's message to its parent, aligned to it
        scaled: list[np.ndarray | None] = [None] * len(self.cliques)  # exp(belief - shift), as above
        shifts: list[np.ndarray | float | None] = [None] * len(self.cliques)  # the clique's top, or each slice's
        sums: list[np.ndarray | None] = [None] * len(self.cliques)  # each slice's sum of scaled (keepdims)
        for child, parent in self._schedule:
            axes = self._axes_off(child, parent)
            for per_slice in (False, True):
                belief = self._with_children(potentials, up, child)
                shifts[child] = np.max(belief, axis=axes, keepdims=True) if per_slice else float(belief.max())
                # a belief is a fresh array (written in place from here on) unless it is the potential itself
                exps = np.subtract(belief, shifts[child], out=None if belief is potentials[child] else belief)
                np.exp(exps, out=exps)
                sums[child] = _sum_out(exps, axes, keepdims=True)
                if per_slice or sums[child].min() >= _SMALLEST_SUM:
                    break
            up[child] = self._aligned(np.log(sums[child]) + shifts[child], self.cliques[child], self.cliques[parent])
            scaled[child] = exps
        marginals: list[np.ndarray | None] = [None] * len(self.cliques)
        down: list[np.ndarray | None] = [None] * len(self.cliques)  # the parent's message, aligned to i
        for i in self._top_down:
            if scaled[i] is None:  # a root: its whole belief, exponentiated
                belief = self._with_children(potentials, up, i)
                probabilities = np.subtract(belief, belief.max(), out=None if belief is potentials[i] else belief)
                np.exp(probabilities, out=probabilities)
                probabilities /= probabilities.sum()
            else:  # the factor's largest cell is 1, where a slice's sum is at least _SMALLEST_SUM: never 0 / 0
                factor = shifts[i] + down[i]
                factor -= factor.max()
                np.exp(factor, out=factor)
                factor /= (factor * sums[i]).sum()
                probabilities = scaled[i]
                probabilities *= factor
                scaled[i] = shifts[i] = down[i] = sums[i] = None
            marginals[i] = probabilities
            for child in self._children[i]:
                summed = _sum_out(probabilities, self._axes_off(i, child), keepdims=True)
                with np.errstate(divide="ignore"):
                    down[child] = self._aligned(np.log(summed) - up[child], self.cliques[i], self.cliques[child])
        return marginals

    def _axes_off(self, i: int, j: int) -> tuple[int, ...]:
        """The axes of clique ``i`` that clique ``j`` lacks (what a message from i to j sums out)."""
        return tuple(k for k, c in enumerate(self.cliques[i]) if c not in self._sets[j])

    def _with_children(self, potentials: list[np.ndarray], up: list, i: int) -> np.ndarray:
        """Clique ``i``'s potential plus its children's messages: a new array, or the potential itself
        when it has no children (then not to be written to)."""
        children = self._children[i]
        if not children:
            return potentials[i]
        belief = potentials[i] + up[children[0]]
        for child in children[1:]:
            belief += up[child]
        return belief

    def project(self, columns: Sequence[str]) -> np.ndarray:
        """The model's counts (total times probability) on ``columns``, axes in the order given."""
        ordered = self._ordered(columns)
        counts = self.total * self._probabilities(ordered)
        return np.transpose(counts, [ordered.index(c) for c in columns])

    def marginal(self, columns: Sequence[str]) -> np.ndarray:
        """The model's probabilities on ``columns``, axes in the order given."""
        return self.project(columns) / self.total

    def _probabilities(self, keep: Columns) -> np.ndarray:
        """The model's probabilities on ``keep`` (domain order): a sum over the smallest clique holding
        them, else variable elimination on the cliques' marginals."""
        wanted = set(keep)
        holders = [i for i, c in enumerate(self._sets) if wanted <= c]
        if holders:
            return self._sum(min(holders, key=lambda i: self.potentials[i].size), keep, share=False)
        return self._eliminate(keep)

    def _sum(self, clique: int, columns: Columns, *, share: bool = True) -> np.ndarray:
        """Clique ``clique``'s marginal summed onto ``columns`` (domain order).

        With ``share``, kept for reuse until the marginals change (the sums that eliminations
        share: separators and clique parts), up to one model's worth of cells.
        """
        key = (clique, columns)
        if key in self._sums:
            return self._sums[key]
        axes = tuple(k for k, c in enumerate(self.cliques[clique]) if c not in columns)
        if not axes:
            return self.marginals[clique]  # the marginal itself (never written to), nothing to keep
        summed = _sum_out(self.marginals[clique], axes)
        if share and self._sum_cells + summed.size <= self.cells:
            self._sums[key] = summed
            self._sum_cells += summed.size
        return summed

    def _eliminate(self, keep: Columns) -> np.ndarray:
        """Probabilities on ``keep`` (spread over several cliques) by variable elimination.

        Only the smallest subtree whose cliques cover ``keep`` takes part: on it the model
        factorises as the product of its clique marginals over the product of its separators'.
        Each clique's marginal enters summed onto the columns that matter (``keep``'s and its
        separators in the subtree): a column in no separator is in no other factor. Which factors,
        and in which order they are joined, depend on the tree alone: planned once for the model's
        life (AIM asks for the same few hundred marginals each round, between refits).
        """
        plan = self._plans.get(keep)
        if plan is None:
            plan = self._plans[keep] = self._elimination_plan(keep)
        factors, steps = plan
        factors = [(key, columns, self._factor(key, columns)) for key, columns in factors]
        if steps is not None:
            return self._contract(factors, steps, keep)
        factors = [(columns, values) for _, columns, values in factors]
        drop = {c for columns, _ in factors for c in columns} - set(keep)
        while drop:
            column = min(drop, key=lambda c: (self._union_cells([f for f in factors if c in f[0]]), c))
            touching = [f for f in factors if column in f[0]]
            factors = [f for f in factors if column not in f[0]]
            joined, values = self._product(touching)
            factors.append((tuple(c for c in joined if c != column), _sum_out(values, (joined.index(column),))))
            drop.remove(column)
        joined, values = self._product(factors)
        return values / values.sum()

    def _elimination_plan(self, keep: Columns) -> tuple[list, list | None]:
        """``_eliminate``'s factors on ``keep`` ((key, columns): a clique's marginal summed, ("sum", i,
        columns), or a separator's inverse, ("inverse", a, b)) and ``_contract``'s steps over them (None:
        too many columns for np.einsum)."""
        tree = self._covering_subtree(set(keep))
        factors = []
        for i, neighbours in tree.items():
            needed = set(keep).union(*(self._sets[i] & self._sets[j] for j in neighbours))
            columns = self._ordered(self._sets[i] & needed)
            factors.append((("sum", i, columns), columns))
        for a, b in {(min(i, j), max(i, j)) for i in tree for j in tree[i]}:
            factors.append((("inverse", a, b), self._ordered(self._sets[a] & self._sets[b])))
        if len({c for _, columns in factors for c in columns}) > _EINSUM_LABELS:
            return factors, None
        return factors, self._join_steps(factors, keep)

    def _factor(self, key: tuple, columns: Columns) -> np.ndarray:
        """The values of an elimination factor (``_elimination_plan``)."""
        if key[0] == "sum":
            return self._sum(key[1], columns)
        if key[1:] not in self._inverses:
            summed = self._sum(key[1], columns)
            # Where a separator has probability 0, so have both cliques' cells: 0 / 0 counts as 0. So does a
            # subnormal one, whose inverse would overflow to inf and, times a 0, make the projection NaN (review 8).
            tiny = np.finfo(np.float64).tiny
            self._inverses[key[1:]] = np.divide(1.0, summed, out=np.zeros_like(summed), where=summed >= tiny)
        return self._inverses[key[1:]]

    def _join_steps(self, factors: list, keep: Columns) -> list[tuple[int, int, Columns, tuple]]:
        """The order in which ``_contract`` joins ``factors`` ((key, columns)), two at a time: (x, y, the
        result's columns, its key) a step, the result last in the list of factors.

        Each step joins the two factors whose result is smallest, summing out at once every
        column no other factor and not ``keep`` holds, so no array larger than a step's inputs
        and output is made.
        """
        factors, steps = list(factors), []
        while len(factors) > 1:
            count = collections.Counter(c for _, columns in factors for c in columns)
            best = None
            for x, y in itertools.combinations(range(len(factors)), 2):
                cx, cy = factors[x][1], factors[y][1]
                out = {c for c in {*cx, *cy} if c in keep or count[c] > (c in cx) + (c in cy)}
                cells = math.prod(self.domain[c] for c in out)
                if best is None or cells < best[0]:
                    best = (cells, x, y, out)
            _, x, y, out = best
            out = self._ordered(out)
            key = ("join", frozenset((factors[x][0], factors[y][0])), out)
            steps.append((x, y, out, key))
            factors = [f for k, f in enumerate(factors) if k not in (x, y)] + [(key, out)]
        return steps

    def _contract(self, factors: list, steps: list, keep: Columns) -> np.ndarray:
        """The product of ``factors`` ((key, columns, values)) summed onto ``keep`` (normalised), joined by
        ``steps`` (``_join_steps``): np.einsum on two operands (a batched matrix product), or a broadcast
        product where nothing is summed out. Joins are kept by key until the marginals change: projections
        in one round share their first steps."""
        involved = self._ordered({c for _, columns, _ in factors for c in columns})
        label = {c: k for k, c in enumerate(involved)}
        for x, y, out, key in steps:
            (_, ca, a), (_, cb, b) = factors[x], factors[y]
            joined = self._joins.get(key)
            if joined is None:
                if set(out) == set(ca) | set(cb):  # nothing summed out: a broadcast product (einsum is slow at it)
                    joined = self._aligned(a, ca, out) * self._aligned(b, cb, out)
                else:
                    la, lb, lo = ([label[c] for c in columns] for columns in (ca, cb, out))
                    joined = np.einsum(a, la, b, lb, lo, optimize=True)
                if self._join_cells + joined.size <= self.cells:
                    self._joins[key] = joined
                    self._join_cells += joined.size
            factors = [f for k, f in enumerate(factors) if k not in (x, y)] + [(key, out, joined)]
        _, columns, values = factors[0]
        axes = tuple(k for k, c in enumerate(columns) if c not in keep)
        values = _sum_out(values, axes) if axes else values
        return values / values.sum()

    def _covering_subtree(self, keep: set[str]) -> dict[int, set[int]]:
        """The fewest cliques, connected in the tree, that hold every column of ``keep``.

        Leaves whose ``keep`` columns their one neighbour also holds are pruned until none is
        left; by running intersection a column a leaf shares with the rest is in that neighbour.
        Cliques in other trees of the forest fall away (they hold none of keep's columns, or
        are kept and then independent of the rest).
        """
        tree = {i: set(j) for i, j in self._adjacent.items()}
        pruning = True
        while pruning:
            pruning = False
            for i in list(tree):
                neighbours = tree[i]
                mine = keep & self._sets[i]
                if len(tree) > 1 and (
                    (not neighbours and not mine)
                    or (len(neighbours) == 1 and mine <= self._sets[next(iter(neighbours))])
                ):
                    for j in tree.pop(i):
                        tree[j].discard(i)
                    pruning = True
        return tree

    def _union_cells(self, factors: list) -> int:
        return math.prod(self.domain[c] for c in {c for columns, _ in factors for c in columns})

    def _product(self, factors: list) -> tuple[Columns, np.ndarray]:
        joined = self._ordered({c for columns, _ in factors for c in columns})
        total = np.ones(self._shape(joined))
        for columns, values in factors:
            total = total * self._aligned(values, columns, joined)
        return joined, total

    # -- estimation -------------------------------------------------------------------
    def fit(self, measurements: Sequence[Measurement], *, iterations: int = 500, tolerance: float = 0.0) -> None:
        """Mirror descent on the squared error to ``measurements``, from the current potentials.

        At most ``iterations`` steps; fewer when the last ``_WINDOW`` steps lowered the loss by
        less than ``tolerance`` each on average. The loss is the measurements' negative Gaussian
        log-likelihood (up to a constant), so ``tolerance`` is in nats: 1 stops once a step gains
        less than a likelihood ratio of e, a difference the measurements' noise cannot tell apart.
        0 (the default) runs every iteration, the same steps as before the rule up to rounding.

        Measurements of the same columns act as one, at their inverse-variance weighted mean
        (the loss differs by a constant, the gradient not at all). Each measured marginal is
        summed from the smallest measured one holding it, and the gradient gathered the same
        way, so a clique is swept once per measured set that no other measured set holds.
        Memory: a few arrays of each measured clique's size, and the measurements themselves;
        never one clique-sized array per measurement.
        """
        tolerance = parameters.non_negative_finite(tolerance, "tolerance")
        terms, constant = self._terms(measurements)
        holders = sorted({t.holder for t in terms})

        def evaluate(marginals: list[np.ndarray]) -> tuple[float, list[np.ndarray], list[np.ndarray]]:
            """The loss, each term's weighted residual (its gradient in the term's counts), its counts."""
            summed: list[np.ndarray | None] = [None] * len(terms)
            for k, t in enumerate(terms):  # the largest first: each sums from its source
                source = marginals[t.holder] if t.source is None else summed[t.source]
                summed[k] = _sum_out(source, t.axes) if t.axes else source
            loss, weighted, counts = constant, [], []
            for t, probabilities in zip(terms, summed, strict=True):
                if t.target is None:  # a partial sum: in no term of the loss
                    weighted.append(None)
                    counts.append(None)
                    continue
                counts.append(self.total * probabilities)
                residual = counts[-1] - t.target
                weighted.append(t.weight * residual)
                loss += 0.5 * float(np.vdot(weighted[-1], residual))
                counts[-1].flags.writeable = weighted[-1].flags.writeable = False  # the step's decrease reads them
            return loss, weighted, counts

        def gradient(weighted: list[np.ndarray]) -> dict[int, np.ndarray]:
            """The loss's gradient in each measured clique's counts: each term's part spread over its source."""
            gathered, out = dict(enumerate(weighted)), {}
            for k in reversed(range(len(terms))):  # the smallest first: each adds into its source
                t, part = terms[k], gathered[k]
                if part is None:  # a partial sum nothing was summed from
                    continue
                part = part.reshape(t.inside)
                if t.source is None:
                    into, key, shape = out, t.holder, self.potentials[t.holder].shape
                else:
                    into, key, shape = gathered, t.source, self._shape(terms[t.source].columns)
                if into.get(key) is None:
                    into[key] = np.broadcast_to(part, shape).copy()
                elif into is gathered and into[key] is weighted[key]:  # not to be written to: the decrease reads it
                    into[key] = into[key] + part
                else:
                    into[key] += part
            return out

        theta = self.potentials
        loss, weighted, counts = evaluate(self.marginals)
        marginals, grad = self.marginals, gradient(weighted)
        # Step: grow slowly while the Armijo condition holds, halve (and retry) when it fails;
        # kept between fits, since a refit after one more measurement needs a similar step.
        smallest = 1.0 / (self.total * sum(1.0 / m.sigma**2 for m in measurements))
        step = max(self._step or smallest, smallest)
        history = [loss]
        for _ in range(iterations):
            if tolerance and len(history) > _WINDOW and history[-1 - _WINDOW] - history[-1] < _WINDOW * tolerance:
                break
            trial = list(theta)
            for h in holders:
                trial[h] = np.multiply(grad[h], -step)
                trial[h] += theta[h]
            trial_marginals = self._calibrate(trial)
            trial_loss, trial_weighted, trial_counts = evaluate(trial_marginals)
            # <gradient, counts - trial counts> over the cliques, taken in each term's own cells
            pairs = zip(weighted, counts, trial_counts, strict=True)
            decrease = sum(float(np.vdot(w, c - d)) for w, c, d in pairs if w is not None)
            if loss - trial_loss >= 0.5 * step * decrease:
                theta, marginals, loss, weighted, counts = (
                    trial,
                    trial_marginals,
                    trial_loss,
                    trial_weighted,
                    trial_counts,
                )
                grad = gradient(weighted)
                step *= 1.01
            else:
                step *= 0.5
                if step < 1e-6 * smallest:  # no step lowers the loss: a minimum, up to rounding
                    break
            history.append(loss)
        self._step = step
        self.potentials, self.marginals = theta, marginals

    def _terms(self, measurements: Sequence[Measurement]) -> tuple[list[_Term], float]:
        """The loss's terms, one per measured column set, largest first, and the loss's constant part;
        among them, partial sums that several measured sets are summed from (``_partial_sums``).

        The measurements y_i (weights w_i = 1 / sigma_i^2, or one per value) of one set give
        sum_i w_i ||x - y_i||^2 / 2 = W ||x - ybar||^2 / 2 + (sum_i w_i ||y_i||^2 - W ||ybar||^2) / 2,
        with W = sum_i w_i and ybar = sum_i w_i y_i / W.
        """
        grouped: dict[Columns, list[Measurement]] = {}
        for m in measurements:
            if self.clique_holding(m.columns) is None:
                raise ValueError(f"measurement {m.columns} lies in no clique of the model")
            if tuple(m.columns) != self._ordered(m.columns):  # its counts would be fitted transposed (review 8)
                raise ValueError(f"measurement {m.columns}: columns must come in the domain's order")
            grouped.setdefault(m.columns, []).append(m)
        constant, combined = 0.0, {}
        for columns, group in grouped.items():
            weights = [m.weights() for m in group]  # a number, or one per value
            weight = sum(weights)
            target = group[0].values
            if len(group) > 1:
                target = sum(w * m.values for w, m in zip(weights, group, strict=True)) / weight
            constant += 0.5 * (sum(float((w * m.values**2).sum()) for w, m in zip(weights, group, strict=True))
                               - float((weight * target**2).sum()))  # fmt: skip
            combined[columns] = (weight, target)
        holding = {columns: self.clique_holding(columns) for columns in combined}
        for holder, clique in enumerate(self.cliques):
            inside = [c for c in combined if holding[c] == holder and set(c) < self._sets[holder]]
            widest = [c for c in inside if not any(set(c) < set(other) for other in inside)]
            for columns in self._partial_sums(clique, widest):  # a partial sum's first holder is its clique's
                combined.setdefault(columns, (None, None))
                holding.setdefault(columns, holder)
        order = sorted(combined, key=lambda c: (-math.prod(self._shape(c)), -len(c), c))
        terms: list[_Term] = []
        for columns in order:
            holder = holding[columns]
            # the smallest set already listed (so larger) in the same clique that holds this one
            sources = [k for k, t in enumerate(terms) if t.holder == holder and set(columns) < set(t.columns)]
            source = min(sources, key=lambda k: math.prod(self._shape(terms[k].columns))) if sources else None
            within = self.cliques[holder] if source is None else terms[source].columns
            axes = tuple(i for i, c in enumerate(within) if c not in columns)
            inside = tuple(self.domain[c] if c in columns else 1 for c in within)
            weight, target = combined[columns]
            terms.append(_Term(columns, holder, source, axes, inside, weight, target))
        return terms, constant

    def _partial_sums(self, columns: Columns, inside: list[Columns]) -> list[Columns]:
        """Sets between ``columns`` and the sets ``inside`` it, each worth summing once for several of them.

        A fit sums every measured marginal out of its clique, and gathers its gradient back, at
        each step: one pass over the clique each. Where k sets lack a column of size n, summing
        that column out once and the k sets from the result costs about 1 + k / n passes instead
        of k; the column that saves most first, then again within the result.
        """
        found = []
        while True:
            best = None
            for column in columns:
                lacking = [c for c in inside if column not in c]
                saved = len(lacking) - 1 - len(lacking) / self.domain[column]
                if saved > 0 and (best is None or saved > best[0]):
                    best = (saved, column, lacking)
            if best is None:
                return found
            _, column, lacking = best
            within = tuple(c for c in columns if c != column)
            found += [within, *self._partial_sums(within, [c for c in lacking if c != within])]
            inside = [c for c in inside if c not in lacking]

    @classmethod
    def of_log_potentials(
        cls,
        domain: dict[str, int],
        factors: Sequence[tuple[Sequence[str], np.ndarray]],
        total: float = 1.0,
        *,
        column_sets: Sequence[Sequence[str]] = (),
    ) -> GraphicalModel:
        """The model whose log-density is the sum of ``factors`` ((columns, log-potential, axes in that
        order)), on a junction tree holding their columns and ``column_sets``; each factor's columns are
        complete in its graph, so each lies inside one clique."""
        model = cls(domain, [*(columns for columns, _ in factors), *column_sets], total)
        for columns, potential in factors:
            holder = model.clique_holding(columns)
            ordered = model._ordered(columns)
            potential = np.transpose(potential, [list(columns).index(c) for c in ordered])
            model.potentials[holder] = model.potentials[holder] + model._aligned(
                potential, ordered, model.cliques[holder]
            )
        model.marginals = model._calibrate(model.potentials)
        return model

    def extended(self, column_sets: Sequence[Sequence[str]]) -> GraphicalModel:
        """A model whose cliques hold this one's and ``column_sets``, starting from this one's potentials
        (a warm start: the same distribution)."""
        factors = list(zip(self.cliques, self.potentials, strict=True))
        model = GraphicalModel.of_log_potentials(self.domain, factors, self.total, column_sets=column_sets)
        model._step = self._step
        return model

    # -- sampling ---------------------------------------------------------------------
    def sample(self, rows: int, source: RandomSource) -> dict[str, np.ndarray]:
        """``rows`` rows drawn from the model, clique by clique down the tree, each clique's values given its
        parent's by one systematic sample a parent cell (``sampling.allocate``; post-processing)."""
        out: dict[str, np.ndarray] = {}
        parents = dict(self._schedule)
        for i in [r for r in range(len(self.cliques)) if r not in parents] + [c for c, _ in self._schedule[::-1]]:
            clique = self.cliques[i]
            given = self._ordered(set(clique) & set(self.cliques[parents[i]])) if i in parents else ()
            free = tuple(c for c in clique if c not in given)
            probabilities = self.marginals[i]
            probabilities = np.moveaxis(probabilities, [clique.index(c) for c in given], range(len(given)))
            table = probabilities.reshape(math.prod(self._shape(given)), -1)
            condition = cells_of([out[c] for c in given], self._shape(given)) if given else np.zeros(rows, np.int64)
            cells = allocate(table, condition, source)
            del condition
            out.update(zip(free, split_cells(cells, self._shape(free)), strict=True))  # each in its code_dtype
        return {c: out[c] for c in self.domain}


def _sum_out(array: np.ndarray, axes: tuple[int, ...], *, keepdims: bool = False) -> np.ndarray:
    """A finite float ``array`` summed over ``axes`` (non-negative), by matrix products on its own layout:
    adjacent axes merged, the last summed run of them (r values, between a rows and b columns kept) is
    ones times (r, b) or (a, r) times ones, (a, r b) times a stack of r b-by-b identities while that stack
    is small, or else ones times each (r, b) slice; then the next run. numpy's reduce over a middle axis
    ahead of short ones runs a short inner loop per output cell: up to 10 ns a cell on the cliques here,
    against 0.1 to 0.5. BLAS's sums may round differently with its number of threads."""
    if not axes:
        return array.copy()
    shape = [1 if k in axes else n for k, n in enumerate(array.shape) if keepdims or k not in axes]
    runs: list[list] = []  # [size, summed out], adjacent axes of one kind merged
    for k, n in enumerate(array.shape):
        if runs and runs[-1][1] == (k in axes):
            runs[-1][0] *= n
        else:
            runs.append([n, k in axes])
    values = np.ascontiguousarray(array)
    while any(summed for _, summed in runs):
        j = max(i for i, (_, summed) in enumerate(runs) if summed)
        rows, size, columns = math.prod(n for n, _ in runs[:j]), runs[j][0], math.prod(n for n, _ in runs[j + 1 :])
        if columns == 1:
            values = values.reshape(rows, size) @ _ones(size)
        elif rows == 1:
            values = _ones(size) @ values.reshape(size, columns)
        elif columns <= 16 and size * columns <= 4096:  # b^2 r products a row for b r values; at most 512 KiB
            values = values.reshape(rows, size * columns) @ _stacked_identities(size, columns)
        else:
            values = np.matmul(_ones(size), values.reshape(rows, size, columns))
        runs = [*runs[:j], [columns, False]]
        if j and not runs[j - 1][1]:
            runs[j - 1 : j + 1] = [[runs[j - 1][0] * columns, False]]
    return values.reshape(shape)


def _ones(size: int) -> np.ndarray:
    """``size`` ones: kept (read-only) up to 4096 of them, made afresh beyond, so no large one is held."""
    return _kept_ones(size) if size <= 4096 else np.ones(size)


@functools.lru_cache(maxsize=64)
def _kept_ones(size: int) -> np.ndarray:
    ones = np.ones(size)
    ones.flags.writeable = False
    return ones


@functools.lru_cache(maxsize=64)
def _stacked_identities(size: int, columns: int) -> np.ndarray:
    """``size`` identities of ``columns`` by ``columns``, one above the other (kept, read-only: the caller
    asks for at most 4096 rows)."""
    stacked = np.tile(np.eye(columns), (size, 1))
    stacked.flags.writeable = False
    return stacked
