"""Privacy budgets: every release is charged, composition is explicit, overspending is refused.

A ``Release`` states what one mechanism run costs; a ``PrivacyBudget`` adds releases up and
refuses, before the mechanism runs, any release that would take it past its total.

How releases compose, in a budget of (epsilon, delta):
- Pure DP (delta = 0): epsilons add up. Every release must be pure; a zCDP release (Gaussian
  noise) or an approximate one (a threshold on keys found in the data) cannot be charged.
- delta > 0: the approximate releases' deltas (they are (epsilon_i, delta_i)-DP) add up first; they
  must stay within delta, and what is left of it, delta', is the slack of the conversion below. Two
  rules are valid, and the smaller epsilon is what is spent:
  1. basic composition: every release has an epsilon (zCDP-only ones do not), and the
     epsilons add up (with the deltas above);
  2. approximate zCDP: each approximate release is delta_i-approximately (epsilon_i, 0)-zCDP, every
     other release rho_j-zCDP; composed in any order, adaptively (each cost fixed before the first
     runs), they are sum(delta_i)-approximately (xi, rho)-zCDP, xi the approximate releases'
     epsilons and rho the others' rhos, added up (Bun and Steinke 2016, section 8). Their "good" pair
     of distributions has Renyi divergence at most xi + rho * alpha at every order alpha, and that
     curve is converted to epsilon at delta' (zcdp_to_epsilon with xi). The theorem, its sources,
     its steps and its hypothesis: docs/DESIGN.md, section 6.

What each mechanism costs in zCDP: the exponential mechanism is epsilon-bounded-range, hence
epsilon**2/8-zCDP (Cesar and Rogers 2021); any other pure epsilon-DP mechanism, permute-and-flip
and Laplace included, only epsilon**2/2-zCDP.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from beam_expmech import parameters

# RDP orders for the zCDP -> (epsilon, delta) conversion, wide enough for small rho; above 1.01, where its
# bound is numerically stable (dp-accounting gives 1.01 itself no bound, so it is left out here).
_RDP_ORDERS = tuple(float(a) for a in np.concatenate([np.linspace(1.01, 10, 200), np.geomspace(10.1, 1e7, 400)])[1:])
# Floating-point sums of epsilons such as 0.1 * 10 may exceed the total by an ulp or so.
_RELATIVE_SLACK = 1e-12


@dataclass(frozen=True)
class Release:
    """The cost of one mechanism run: its epsilon (None if it has none), its zCDP rho (None if it has
    none) and its delta (0 but for approximate releases, which are (epsilon, delta)-DP)."""

    label: str
    epsilon: float | None
    rho: float | None
    delta: float = 0.0

    @classmethod
    def exponential_mechanism(cls, epsilon: float, label: str = "exponential mechanism") -> Release:
        """The exponential mechanism (and its one-shot top-k): epsilon-DP and epsilon**2/8-zCDP."""
        epsilon = parameters.positive_finite(epsilon, "epsilon")
        return cls(label, epsilon, epsilon**2 / 8)

    @classmethod
    def pure(cls, epsilon: float, label: str) -> Release:
        """Any epsilon-DP mechanism that is not bounded-range (permute-and-flip, Laplace): epsilon**2/2-zCDP."""
        epsilon = parameters.positive_finite(epsilon, "epsilon")
        return cls(label, epsilon, epsilon**2 / 2)

    @classmethod
    def zcdp(cls, rho: float, label: str) -> Release:
        """A rho-zCDP mechanism with no pure guarantee (Gaussian noise)."""
        return cls(label, None, parameters.positive_finite(rho, "rho"))

    @classmethod
    def approximate(cls, epsilon: float, delta: float, label: str) -> Release:
        """An (epsilon, delta)-DP mechanism with delta > 0 and no zCDP guarantee (a threshold on keys)."""
        epsilon = parameters.positive_finite(epsilon, "epsilon")
        return cls(label, epsilon, None, parameters.probability(delta, "delta"))

    def describe(self) -> str:
        """The cost in one phrase, as every message and log line states it: "epsilon=1 (rho=0.125)"."""
        if self.epsilon is None:
            return f"rho={self.rho:g} (zCDP)"
        if self.rho is None:
            return f"epsilon={self.epsilon:g}, delta={self.delta:g}"
        return f"epsilon={self.epsilon:g} (rho={self.rho:g})"


def compose(releases: list[Release], label: str) -> Release:
    """Several releases of one run as one (sequential composition, what a budget adds up anyway): the epsilons
    add (None if one has none), the zCDP rhos add (None if one has none), the deltas add."""
    if not releases:
        raise ValueError("compose needs at least one release")
    epsilons, rhos = [r.epsilon for r in releases], [r.rho for r in releases]
    return Release(
        label,
        None if None in epsilons else math.fsum(epsilons),
        None if None in rhos else math.fsum(rhos),
        math.fsum(r.delta for r in releases),
    )


@dataclass(frozen=True)
class ZcdpShare:
    """What a zCDP mechanism may spend in a run's (epsilon, delta) budget beside the run's other releases:
    its ``rho``, the ``route`` that gives it (``zcdp_beside``), and ``release``, its own charge on that route."""

    rho: float
    route: str
    release: Release


def zcdp_beside(epsilon: float, delta: float, others: list[Release], label: str) -> ZcdpShare:
    """The larger rho a zCDP mechanism may spend in one (``epsilon``, ``delta``) budget with ``others``, by the
    better of two routes, each composing to (epsilon, delta)-DP:

    - ``"zcdp"`` (every other release has a rho): the rhos add up, so the mechanism gets the rho of
      (epsilon, delta) less the others' rhos, and is charged as a rho-zCDP release;
    - ``"basic"`` (every other release pure): the epsilons add up (basic composition), so the mechanism gets
      the rho of (epsilon - their epsilons, delta), and is charged as that (epsilon', delta)-DP release,
      which its rho-zCDP implies.

    An exponential mechanism of epsilon_e is both epsilon_e-DP and epsilon_e^2/8-zCDP; against the rho of a
    small (epsilon, delta), epsilon_e^2/8 is large (at epsilon 1, delta 1e-9 a share 0.3 takes 75% of rho), and
    basic composition leaves more. The choice reads public parameters only. With no other release, or a tie,
    the route is "zcdp". A ValueError when neither route leaves any rho.
    """
    epsilon = parameters.positive_finite(epsilon, "epsilon")
    delta = parameters.probability(delta, "delta")
    shares = []
    if all(r.rho is not None for r in others):
        rho = epsilon_to_zcdp(epsilon, delta=delta) - math.fsum(r.rho for r in others)
        if rho > 0:
            shares.append(ZcdpShare(rho, "zcdp", Release.zcdp(rho, label)))
    rest = epsilon - math.fsum(r.epsilon or 0.0 for r in others)
    if others and all(r.epsilon is not None and r.delta == 0 for r in others) and rest > 0:
        try:
            rho = epsilon_to_zcdp(rest, delta=delta)
        except ValueError:  # no rho > 0 fits what is left
            rho = 0.0
        if rho > 0:
            shares.append(ZcdpShare(rho, "basic", Release.approximate(rest, delta, label)))
    if not shares:
        raise ValueError(f"the other releases spend all of the (epsilon, delta) budget: nothing is left for {label}")
    return max(shares, key=lambda share: share.rho)  # the first, "zcdp", on a tie


class BudgetExceededError(RuntimeError):
    """A release would take a budget past its total; nothing was charged."""

    def __init__(self, budget: PrivacyBudget, release: Release, spent_after: float):
        self.budget, self.release, self.spent_after = budget, release, spent_after
        would = f"which would make {spent_after:g}" if math.isfinite(spent_after) else "which delta cannot hold"
        super().__init__(
            f"privacy budget exceeded: the budget is epsilon={budget.epsilon:g} (delta={budget.delta:g}), "
            f"{budget.spent():g} is spent, and {release.label!r} asks for {release.describe()}, {would}"
        )


class PrivacyBudget:
    """A total (epsilon, delta)-DP guarantee, and the releases charged to it so far."""

    def __init__(self, *, epsilon: float, delta: float = 0.0):
        self.epsilon = parameters.positive_finite(epsilon, "epsilon")
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 <= delta < 1:
            raise ValueError(f"delta must be a number in [0, 1), got {delta!r}")
        self.delta = float(delta)
        self._releases: list[Release] = []

    @property
    def releases(self) -> tuple[Release, ...]:
        return tuple(self._releases)

    def spent(self) -> float:
        """The epsilon spent so far, at the budget's delta."""
        return self._epsilon_of(self._releases)

    def remaining(self) -> float:
        return max(0.0, self.epsilon - self.spent())

    def remaining_delta(self) -> float:
        """The delta that approximate releases have not taken (what is left for the conversion of rho)."""
        return max(0.0, self.delta - math.fsum(r.delta for r in self._releases))

    def charge(self, release: Release) -> None:
        """Record ``release``, or raise ``BudgetExceededError`` (recording nothing) if it does not fit."""
        if self.delta == 0 and (release.epsilon is None or release.delta > 0):
            raise ValueError(
                f"{release.label!r} is not pure DP ({release.describe()}); charge it to a budget with delta > 0"
            )
        spent_after = self._epsilon_of([*self._releases, release])
        if spent_after > self.epsilon * (1 + _RELATIVE_SLACK):
            raise BudgetExceededError(self, release, spent_after)
        self._releases.append(release)

    def _epsilon_of(self, releases: list[Release]) -> float:
        """The epsilon ``releases`` spend at the budget's delta (module docstring); inf if they cannot fit."""
        if not releases:
            return 0.0
        slack = self.delta - math.fsum(r.delta for r in releases)  # delta', left for the conversion
        if slack < 0:
            return math.inf
        basic = math.fsum(r.epsilon for r in releases) if all(r.epsilon is not None for r in releases) else math.inf
        rhos = [r.rho for r in releases if r.rho is not None]
        if self.delta == 0 or (rhos and slack == 0):
            return basic
        approximate = math.fsum(r.epsilon for r in releases if r.rho is None)  # xi: inside the conversion
        return min(basic, zcdp_to_epsilon(math.fsum(rhos), delta=slack, xi=approximate) if rhos else approximate)


@functools.lru_cache(maxsize=256, typed=True)  # a pure function, asked for again and again by a bisection
def zcdp_to_epsilon(rho: float, *, delta: float, xi: float = 0.0) -> float:
    """The epsilon of (epsilon, delta)-DP implied by (xi, rho)-zCDP: RDP's conversion, as dp-accounting does it.

    (xi, rho)-zCDP bounds the Renyi divergence at every order alpha > 1 by r = xi + rho * alpha (Bun and
    Steinke 2016; xi = 0 for rho-zCDP), and (alpha, r)-RDP implies (epsilon, delta)-DP with
    epsilon = r + log(1 - 1/alpha) - log(delta * alpha) / (alpha - 1) (Canonne, Kamath and Steinke 2020,
    Proposition 12); and (0, delta)-DP where delta >= sqrt(1 - exp(-r)), since r bounds the KL divergence,
    which bounds the total variation (Bretagnolle and Huber). Both hold for any two distributions with those
    divergences, the conditioned pair of an approximate ledger included (DESIGN.md, section 6): xi is in r,
    so in the KL bound too. The least over _RDP_ORDERS: number for number what dp-accounting's
    compute_epsilon returns for the curve xi + rho * alpha on these orders (its RdpAccountant for a
    ZCDpEvent where xi = 0; tests check both), without its import of scipy: 1.8 s of every zCDP job's
    start-up.
    """
    rho = parameters.positive_finite(rho, "rho")
    delta = parameters.probability(delta, "delta")
    xi = parameters.non_negative_finite(xi, "xi")
    least = math.inf
    for alpha in _RDP_ORDERS:
        r = xi + rho * alpha
        if delta**2 + math.expm1(-r) > 0:
            return 0.0
        least = min(least, r + math.log1p(-1 / alpha) - math.log(delta * alpha) / (alpha - 1))
    return max(0.0, least)


@functools.lru_cache(maxsize=64, typed=True)  # 35 conversions a call: a job asks for its rho more than once
def epsilon_to_zcdp(epsilon: float, *, delta: float) -> float:
    """The largest rho (to 1e-9 relative) whose rho-zCDP guarantee converts to (epsilon, delta)-DP.

    What a zCDP mechanism may spend inside an (epsilon, delta) budget; never more, since the
    bisection keeps the lower end, at which the conversion is checked.
    """
    epsilon = parameters.positive_finite(epsilon, "epsilon")
    delta = parameters.probability(delta, "delta")
    # rho-zCDP is (rho + 2 sqrt(rho log(1/delta)), delta)-DP; capped where epsilon**2 would overflow (review 10)
    low, high = 0.0, min(epsilon * (epsilon / 2 + 1), 1e300)
    while zcdp_to_epsilon(high, delta=delta) <= epsilon:
        low, high = high, 2 * high
    while high - low > 1e-9 * high:
        middle = (low + high) / 2
        if zcdp_to_epsilon(middle, delta=delta) <= epsilon:
            low = middle
        else:
            high = middle
    if low == 0:
        raise ValueError(f"no rho > 0 fits epsilon={epsilon:g} at delta={delta:g}")
    return low
