"""A graphical model fitted to noisy marginals: the estimation step of AIM (as in Private-PGM).

Post-processing only: the model sees noisy measurements and public parameters, never data.

The model is a Markov random field, p(x) proportional to exp(sum_C theta_C(x_C)), over the
maximal cliques C of a junction tree built from the measured column sets. ``fit`` minimises
    sum over measurements m of ||N p_m - y_m||^2 / (2 sigma_m^2)
(p_m the model's marginal on m's columns, y_m the noisy counts, N the public total) by entropic
mirror descent on the log-potentials theta (McKenna, Sheldon, Miklau 2019), with a backtracking
step; belief propagation in log space gives the clique marginals at each step.

Every array is laid out with its columns in the domain's order, so aligning two factors is a
reshape, never a transpose.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from beam_expmech.mechanisms.randomness import RandomSource

Columns = tuple[str, ...]


@dataclass(frozen=True)
class Measurement:
    """Noisy counts ``values`` of the marginal on ``columns`` (domain order), noise scale ``sigma``."""

    columns: Columns
    values: np.ndarray
    sigma: float


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


class GraphicalModel:
    """A Markov random field on a junction tree, its total, and its calibrated clique marginals."""

    def __init__(self, domain: dict[str, int], column_sets: Sequence[Sequence[str]], total: float = 1.0):
        self.domain = dict(domain)
        self.total = float(total)
        self.cliques, self.edges = junction_tree(self.domain, column_sets)
        self.potentials = [np.zeros(self._shape(c)) for c in self.cliques]
        self._step: float | None = None  # the mirror descent's last step size
        self._schedule = self._message_schedule()
        self.log_marginals = self._calibrate(self.potentials)

    # -- structure --------------------------------------------------------------------
    def _shape(self, columns: Sequence[str]) -> tuple[int, ...]:
        return tuple(self.domain[c] for c in columns)

    def _ordered(self, columns: Sequence[str]) -> Columns:
        return tuple(c for c in self.domain if c in columns)

    def _aligned(self, array: np.ndarray, columns: Columns, target: Columns) -> np.ndarray:
        """``array`` over ``columns`` reshaped to broadcast against ``target`` (columns a subset, same order)."""
        return array.reshape([self.domain[c] if c in columns else 1 for c in target])

    def clique_holding(self, columns: Sequence[str]) -> int | None:
        return next((i for i, c in enumerate(self.cliques) if set(columns) <= set(c)), None)

    def _message_schedule(self) -> list[tuple[int, int]]:
        """(child, parent) pairs, leaves first, over every tree of the forest."""
        adjacent = {i: [] for i in range(len(self.cliques))}
        for i, j in self.edges:
            adjacent[i].append(j)
            adjacent[j].append(i)
        seen, downward = set(), []
        for start in range(len(self.cliques)):
            if start in seen:
                continue
            seen.add(start)
            frontier = [start]
            while frontier:
                parent = frontier.pop(0)
                for child in adjacent[parent]:
                    if child not in seen:
                        seen.add(child)
                        downward.append((child, parent))
                        frontier.append(child)
        return downward[::-1]

    # -- inference --------------------------------------------------------------------
    def _message(self, log_belief: np.ndarray, source: int, target: int) -> np.ndarray:
        separator = set(self.cliques[source]) & set(self.cliques[target])
        axes = tuple(i for i, c in enumerate(self.cliques[source]) if c not in separator)
        summed = _logsumexp(log_belief, axes)
        return self._aligned(summed, self._ordered(separator), self.cliques[target])

    def _calibrate(self, potentials: list[np.ndarray]) -> list[np.ndarray]:
        """Log-probabilities of every clique's marginal (belief propagation, two passes)."""
        incoming = [{} for _ in self.cliques]
        for child, parent in self._schedule:
            belief = potentials[child] + sum(incoming[child].values())
            incoming[parent][child] = self._message(belief, child, parent)
        for child, parent in reversed(self._schedule):
            belief = potentials[parent] + sum(m for k, m in incoming[parent].items() if k != child)
            incoming[child][parent] = self._message(belief, parent, child)
        beliefs = [p + sum(incoming[i].values()) for i, p in enumerate(potentials)]
        return [b - _logsumexp(b, tuple(range(b.ndim))) for b in beliefs]

    def project(self, columns: Sequence[str]) -> np.ndarray:
        """The model's counts (total times probability) on ``columns``, axes in the order given."""
        ordered = self._ordered(columns)
        holder = self.clique_holding(ordered)
        if holder is not None:
            axes = tuple(i for i, c in enumerate(self.cliques[holder]) if c not in ordered)
            log_p = _logsumexp(self.log_marginals[holder], axes)
        else:
            log_p = self._eliminate(ordered)
        counts = self.total * np.exp(log_p)
        return np.transpose(counts, [ordered.index(c) for c in columns])

    def _eliminate(self, keep: Columns) -> np.ndarray:
        """Log-probabilities on ``keep`` (spread over several cliques) by variable elimination.

        Only the smallest subtree whose cliques cover ``keep`` takes part: on it the model
        factorises as the product of its clique marginals over the product of its separators'.
        """
        needed = {next(i for i, c in enumerate(self.cliques) if column in c) for column in keep}
        tree = {i: set() for i in range(len(self.cliques))}
        for i, j in self.edges:
            tree[i].add(j)
            tree[j].add(i)
        # Prune leaves that are not needed until only the connecting subtree is left; cliques
        # in other trees of the forest fall away too (they hold none of keep's columns, or
        # are needed and then independent).
        pruning = True
        while pruning:
            pruning = False
            for i in list(tree):
                if i not in needed and len(tree[i]) <= 1:
                    for j in tree.pop(i):
                        tree[j].discard(i)
                    pruning = True
        factors = [(self.cliques[i], self.log_marginals[i]) for i in tree]
        edges = {(min(i, j), max(i, j)) for i in tree for j in tree[i]}
        for a, b in edges:
            separator = self._ordered(set(self.cliques[a]) & set(self.cliques[b]))
            axes = tuple(k for k, c in enumerate(self.cliques[a]) if c not in separator)
            factors.append((separator, -_logsumexp(self.log_marginals[a], axes)))
        drop = {c for columns, _ in factors for c in columns} - set(keep)
        while drop:
            column = min(drop, key=lambda c: self._union_cells([f for f in factors if c in f[0]]))
            touching = [f for f in factors if column in f[0]]
            factors = [f for f in factors if column not in f[0]]
            joined, log_values = self._product(touching)
            factors.append((tuple(c for c in joined if c != column), _logsumexp(log_values, (joined.index(column),))))
            drop.remove(column)
        joined, log_values = self._product(factors)
        return log_values - _logsumexp(log_values, tuple(range(log_values.ndim)))

    def _union_cells(self, factors: list) -> int:
        return math.prod(self.domain[c] for c in {c for columns, _ in factors for c in columns})

    def _product(self, factors: list) -> tuple[Columns, np.ndarray]:
        joined = self._ordered({c for columns, _ in factors for c in columns})
        total = np.zeros(self._shape(joined))
        for columns, log_values in factors:
            total = total + self._aligned(log_values, columns, joined)
        return joined, total

    # -- estimation -------------------------------------------------------------------
    def fit(self, measurements: Sequence[Measurement], *, iterations: int = 500) -> None:
        """Mirror descent on the squared error to ``measurements``, from the current potentials.

        Memory: a few arrays of each measured clique's size, and the measurements themselves;
        never one clique-sized array per measurement.
        """
        # Per measured clique, for each of its measurements: the clique's axes to sum out (both
        # in domain order, so the sum is aligned with the measurement), and its shape inside the clique.
        plan: dict[int, list[tuple[tuple[int, ...], np.ndarray, float, list[int]]]] = {}
        for m in measurements:
            holder = self.clique_holding(m.columns)
            if holder is None:
                raise ValueError(f"measurement {m.columns} lies in no clique of the model")
            clique = self.cliques[holder]
            summed = tuple(i for i, c in enumerate(clique) if c not in m.columns)
            inside = [self.domain[c] if c in m.columns else 1 for c in clique]
            plan.setdefault(holder, []).append((summed, m.values, 1.0 / m.sigma**2, inside))
        holders = sorted(plan)

        def loss_and_gradient(log_marginals: list[np.ndarray]) -> tuple[float, dict, dict]:
            """The loss, its gradient in each measured clique's counts, and those counts."""
            counts = {h: self.total * np.exp(log_marginals[h]) for h in holders}
            loss, gradient = 0.0, {}
            for h in holders:
                gradient[h] = np.zeros(counts[h].shape)
                for summed, values, weight, inside in plan[h]:
                    residual = np.add.reduce(counts[h], axis=summed) - values
                    weighted = weight * residual
                    loss += 0.5 * float((weighted * residual).sum())
                    gradient[h] += weighted.reshape(inside)
            return loss, gradient, counts

        theta, mu = self.potentials, self.log_marginals
        loss, gradient, counts = loss_and_gradient(mu)
        # Step: grow slowly while the Armijo condition holds, halve (and retry) when it fails;
        # kept between fits, since a refit after one more measurement needs a similar step.
        smallest = 1.0 / (self.total * sum(1.0 / m.sigma**2 for m in measurements))
        step = max(self._step or smallest, smallest)
        for _ in range(iterations):
            trial = list(theta)
            for h in holders:
                trial[h] = theta[h] - step * gradient[h]
            trial_mu = self._calibrate(trial)
            trial_loss, trial_gradient, trial_counts = loss_and_gradient(trial_mu)
            decrease = sum(float((gradient[h] * (counts[h] - trial_counts[h])).sum()) for h in holders)
            if loss - trial_loss >= 0.5 * step * decrease:
                theta, mu, loss, gradient, counts = trial, trial_mu, trial_loss, trial_gradient, trial_counts
                step *= 1.01
            else:
                step *= 0.5
                if step < 1e-6 * smallest:  # no step lowers the loss: a minimum, up to rounding
                    break
        self._step = step
        self.potentials, self.log_marginals = theta, mu

    def extended(self, column_sets: Sequence[Sequence[str]]) -> GraphicalModel:
        """A model whose cliques hold this one's and ``column_sets``, starting from this one's potentials.

        Each old clique is complete in the new graph, so it lies inside a new clique: the
        new model starts as the same distribution (a warm start).
        """
        model = GraphicalModel(self.domain, [*self.cliques, *column_sets], self.total)
        model._step = self._step
        for clique, potential in zip(self.cliques, self.potentials, strict=True):
            holder = model.clique_holding(clique)
            model.potentials[holder] = model.potentials[holder] + model._aligned(
                potential, clique, model.cliques[holder]
            )
        model.log_marginals = model._calibrate(model.potentials)
        return model

    # -- sampling ---------------------------------------------------------------------
    def sample(self, rows: int, source: RandomSource) -> dict[str, np.ndarray]:
        """``rows`` rows drawn from the model, clique by clique down the tree (post-processing)."""
        out: dict[str, np.ndarray] = {}
        parents = dict(self._schedule)
        for i in [r for r in range(len(self.cliques)) if r not in parents] + [c for c, _ in self._schedule[::-1]]:
            clique = self.cliques[i]
            given = self._ordered(set(clique) & set(self.cliques[parents[i]])) if i in parents else ()
            free = tuple(c for c in clique if c not in given)
            probabilities = np.exp(self.log_marginals[i])
            probabilities = np.moveaxis(probabilities, [clique.index(c) for c in given], range(len(given)))
            table = probabilities.reshape(math.prod(self._shape(given)), -1)
            condition = (
                np.ravel_multi_index([out[c] for c in given], self._shape(given)) if given else np.zeros(rows, int)
            )
            cells = _draw_rows(table, condition, source)
            for column, codes in zip(free, np.unravel_index(cells, self._shape(free)), strict=True):
                out[column] = codes.astype(np.int64)
        return {c: out[c] for c in self.domain}


def _draw_rows(table: np.ndarray, condition: np.ndarray, source: RandomSource) -> np.ndarray:
    """For each row r, a column index drawn from row ``condition[r]`` of ``table`` (normalised per row)."""
    sums = table.sum(axis=1, keepdims=True)
    table = np.where(sums > 0, table / np.where(sums > 0, sums, 1), 1.0 / table.shape[1])
    cdf = np.cumsum(table, axis=1)
    cdf[:, -1] = 1.0
    flat = (cdf + np.arange(table.shape[0])[:, None]).ravel()  # row s's cdf shifted to [s, s + 1]
    uniform = source.uint32(condition.size).astype(np.float64) * 2.0**-32
    index = np.searchsorted(flat, condition + uniform, side="right")
    return np.clip(index - condition * table.shape[1], 0, table.shape[1] - 1)


def _logsumexp(values: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if not axes:
        return values
    top = values.max(axis=axes, keepdims=True)
    return np.log(np.exp(values - top).sum(axis=axes)) + np.squeeze(top, axis=axes)
