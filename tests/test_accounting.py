"""Budgets: composition, refusal before overspending, and the zCDP costs of each mechanism."""

from __future__ import annotations

import itertools
import math

import pytest

from beam_expmech.accounting import (
    BudgetExceededError,
    PrivacyBudget,
    Release,
    compose,
    epsilon_to_zcdp,
    zcdp_beside,
    zcdp_to_epsilon,
)
from beam_expmech.mechanisms import top_k


def test_pure_budget_adds_epsilons_and_refuses_the_release_that_would_overspend():
    budget = PrivacyBudget(epsilon=1.0)
    for _ in range(10):
        budget.charge(Release.exponential_mechanism(0.1, "pick"))  # 0.1 * 10 must fit despite rounding
    assert budget.spent() == pytest.approx(1.0)
    with pytest.raises(BudgetExceededError) as refused:
        budget.charge(Release.pure(0.05, "permute-and-flip"))
    message = str(refused.value)
    assert "epsilon=1" in message and "permute-and-flip" in message and "0.05" in message and "1.05" in message
    assert len(budget.releases) == 10  # the refused release was not recorded


def test_refusal_comes_before_the_mechanism_runs():
    budget = PrivacyBudget(epsilon=0.5)
    ran = []

    def release(scores):
        budget.charge(Release.exponential_mechanism(1.0, "top-2"))
        ran.append(True)
        return top_k(scores, 2, epsilon=1.0, sensitivity=1)

    with pytest.raises(BudgetExceededError):
        release([1, 2, 3])
    assert ran == []


def test_mechanism_costs():
    assert Release.exponential_mechanism(2.0).rho == pytest.approx(0.5)  # bounded range: eps^2/8
    assert Release.pure(2.0, "pf").rho == pytest.approx(2.0)  # pure only: eps^2/2
    assert Release.zcdp(0.3, "gaussian").epsilon is None


def test_zcdp_composition_beats_summing_many_small_releases():
    budget = PrivacyBudget(epsilon=1.0, delta=1e-6)
    for _ in range(19):
        budget.charge(Release.exponential_mechanism(0.1, "round"))  # 1.9 in pure epsilon
    assert budget.spent() < 1.0
    assert budget.spent() == pytest.approx(zcdp_to_epsilon(19 * 0.01 / 8, delta=1e-6))
    with pytest.raises(BudgetExceededError):
        budget.charge(Release.exponential_mechanism(0.1, "round"))


def test_zcdp_conversion_is_no_worse_than_the_classic_bound():
    for rho in (1e-4, 0.01, 0.5, 3.0):
        for delta in (1e-9, 1e-5):
            classic = rho + 2 * math.sqrt(rho * math.log(1 / delta))  # Bun and Steinke 2016
            assert zcdp_to_epsilon(rho, delta=delta) <= classic + 1e-9


def test_zcdp_only_release_needs_delta():
    with pytest.raises(ValueError, match="delta > 0"):
        PrivacyBudget(epsilon=1.0).charge(Release.zcdp(0.01, "gaussian"))
    approx = PrivacyBudget(epsilon=1.0, delta=1e-6)
    approx.charge(Release.zcdp(0.01, "gaussian"))
    approx.charge(Release.exponential_mechanism(0.2, "pick"))
    assert approx.spent() == pytest.approx(zcdp_to_epsilon(0.01 + 0.2**2 / 8, delta=1e-6))


@pytest.mark.parametrize(
    "epsilon,delta,named",
    [(0, 0, "epsilon"), (math.inf, 0, "epsilon"), (1, 1, "delta"), (1, -0.1, "delta"), (1, math.nan, "delta")],
)
def test_bad_budgets(epsilon, delta, named):
    with pytest.raises(ValueError, match=named):
        PrivacyBudget(epsilon=epsilon, delta=delta)


def test_bad_releases():
    with pytest.raises(ValueError, match="epsilon"):
        Release.exponential_mechanism(-1)
    with pytest.raises(ValueError, match="rho"):
        Release.zcdp(0, "x")
    for delta in (0, 1, -1e-9, math.nan):
        with pytest.raises(ValueError, match="delta"):
            Release.approximate(1.0, delta, "x")  # delta = 0 is a pure release


def test_the_zcdp_conversion_is_dp_accountings_number_for_number():
    # dp-accounting is the reference (a test dependency): its RDP accountant over the same orders. Both
    # branches are reached: the KL bound (epsilon 0) at tiny rho and large delta, Proposition 12 elsewhere.
    from dp_accounting import ZCDpEvent
    from dp_accounting.rdp import RdpAccountant

    from beam_expmech.accounting import _RDP_ORDERS

    zeros = 0
    for rho in [1e-12, 1e-9, 1e-6, 1e-4, 0.003, 0.04, 0.5, 1.0, 7.3, 120.0, 5e4]:
        for delta in [1e-15, 1e-10, 1e-6, 1e-3, 0.1, 0.5, 0.9]:
            accountant = RdpAccountant(orders=list(_RDP_ORDERS))
            accountant.compose(ZCDpEvent(rho=rho))
            assert zcdp_to_epsilon(rho, delta=delta) == float(accountant.get_epsilon(delta)), (rho, delta)
            zeros += zcdp_to_epsilon(rho, delta=delta) == 0
    assert 0 < zeros < 30
    assert zcdp_to_epsilon(2e-16, delta=2e-8) == 0  # the KL bound alone: Proposition 12 gives 7e-8 here
    assert zcdp_to_epsilon(0.5, delta=1e-6) < zcdp_to_epsilon(0.5, delta=1e-9) < zcdp_to_epsilon(0.6, delta=1e-9)
    huge = epsilon_to_zcdp(1e200, delta=1e-5)  # review 10: epsilon**2 overflowed (OverflowError)
    assert 0 < huge < math.inf and zcdp_to_epsilon(huge, delta=1e-5) <= 1e200


def _theorem(xi: float, rho: float, delta_left: float) -> float:
    """The epsilon DESIGN.md section 6's theorem charges for a ledger of approximate releases whose epsilons add to
    xi and other releases whose rhos add to rho, at the delta left: its good pair's Renyi curve xi + rho * alpha
    converted by dp-accounting (a test dependency, the reference), on the library's orders."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    from beam_expmech.accounting import _RDP_ORDERS

    orders = list(_RDP_ORDERS)
    return float(compute_epsilon(orders, [xi + rho * alpha for alpha in orders], delta_left)[0])


def test_the_conversion_with_xi_is_dp_accountings_number_for_number():
    # xi, the approximate releases' epsilons, is part of the Renyi bound at every order, the KL bound included
    zeros = 0
    for xi in [0.0, 1e-9, 0.3, 2.0]:
        for rho in [1e-16, 1e-9, 1e-4, 0.04, 1.0, 120.0]:
            for delta in [1e-12, 1e-6, 0.1, 0.9]:
                assert zcdp_to_epsilon(rho, delta=delta, xi=xi) == _theorem(xi, rho, delta), (xi, rho, delta)
                zeros += zcdp_to_epsilon(rho, delta=delta, xi=xi) == 0
    assert 0 < zeros < 40
    assert zcdp_to_epsilon(0.05, delta=1e-6, xi=0.0) == zcdp_to_epsilon(0.05, delta=1e-6)
    for xi in (-1e-9, math.inf, math.nan):
        with pytest.raises(ValueError, match="xi"):
            zcdp_to_epsilon(0.05, delta=1e-6, xi=xi)


def test_a_small_mixed_ledger_spends_the_theorems_epsilon_in_any_order():
    """Section 6's theorem on keys (0.5, 1e-7), an exponential mechanism (0.3: rho 0.01125) and a Gaussian (rho
    0.02), in a budget of delta 1e-6: the keys' epsilon inside the Renyi curve, the rhos added, converted at
    the 9e-7 of delta the keys leave; basic composition has no number (the Gaussian has no epsilon)."""
    from dp_accounting import ZCDpEvent
    from dp_accounting.rdp import RdpAccountant

    from beam_expmech.accounting import _RDP_ORDERS

    keys, em, gauss = (
        Release.approximate(0.5, 1e-7, "keys"),
        Release.exponential_mechanism(0.3, "top-k"),
        Release.zcdp(0.02, "aim"),
    )
    rho, delta_left = 0.3**2 / 8 + 0.02, 1e-6 - 1e-7
    expected = _theorem(0.5, rho, delta_left)
    zcdp_part = RdpAccountant(orders=list(_RDP_ORDERS))
    zcdp_part.compose(ZCDpEvent(rho=rho))
    assert expected == pytest.approx(0.5 + zcdp_part.get_epsilon(delta_left), rel=1e-15)  # far from the KL bound
    assert expected == pytest.approx(1.6486548, abs=1e-7)
    for order in itertools.permutations([keys, em, gauss]):
        budget = PrivacyBudget(epsilon=2.0, delta=1e-6)
        for release in order:
            budget.charge(release)
        assert budget.spent() == expected, [r.label for r in order]
        assert budget.remaining_delta() == pytest.approx(9e-7, rel=1e-12)


@pytest.mark.parametrize("picks,route", [(4, "basic"), (5, "mixed")])
def test_the_smaller_of_the_two_routes_is_spent(picks, route):
    # keys (0.5, 1e-7) and 4 or 5 exponential mechanisms of 0.1: basic 0.9 or 1.0, mixed 0.93 or 0.99
    releases = [Release.approximate(0.5, 1e-7, "keys")] + [Release.exponential_mechanism(0.1, "pick")] * picks
    basic = math.fsum([0.5] + [0.1] * picks)
    mixed = _theorem(0.5, math.fsum([0.1**2 / 8] * picks), 1e-6 - 1e-7)
    assert (basic < mixed) == (route == "basic")
    for keys_at in range(picks + 1):
        budget = PrivacyBudget(epsilon=1.5, delta=1e-6)
        for release in releases[1 : keys_at + 1] + releases[:1] + releases[keys_at + 1 :]:
            budget.charge(release)
        assert budget.spent() == min(basic, mixed), keys_at


def test_the_kl_bound_counts_the_approximate_epsilons():
    """The good pair's KL divergence is at most xi + rho * alpha: the shortcut to epsilon 0 (Bretagnolle and
    Huber) takes xi in, not rho * alpha alone with xi added after (which charged 0.5 in both budgets here)."""
    tiny = PrivacyBudget(epsilon=1.0, delta=2e-8)
    tiny.charge(Release.approximate(0.5, 1e-8, "keys"))
    tiny.charge(Release.zcdp(5e-17, "count"))  # 1e-8 left: above sqrt(1 - exp(-5e-17 alpha)), not with xi in
    assert tiny.spent() == _theorem(0.5, 5e-17, 1e-8) == pytest.approx(0.5 + 1.3076e-7, abs=1e-11)
    loose = PrivacyBudget(epsilon=1.0, delta=0.9)  # 0.89 left: above sqrt(1 - exp(-0.5 - 0.01 alpha)) at 1.01
    loose.charge(Release.approximate(0.5, 0.01, "keys"))
    loose.charge(Release.zcdp(0.01, "count"))
    assert loose.spent() == _theorem(0.5, 0.01, 0.9 - 0.01) == 0.0


@pytest.mark.parametrize("epsilon,delta", [(1.0, 1e-9), (0.3, 1e-9), (8.0, 1e-6)])
def test_epsilon_to_zcdp_is_the_most_rho_that_fits(epsilon, delta):
    rho = epsilon_to_zcdp(epsilon, delta=delta)
    assert zcdp_to_epsilon(rho, delta=delta) <= epsilon
    assert zcdp_to_epsilon(rho * (1 + 1e-6), delta=delta) > epsilon
    budget = PrivacyBudget(epsilon=epsilon, delta=delta)
    budget.charge(Release.zcdp(rho, "all of it"))
    with pytest.raises(BudgetExceededError):
        budget.charge(Release.zcdp(rho * 1e-3, "a little more"))
    with pytest.raises(ValueError, match="delta"):
        epsilon_to_zcdp(epsilon, delta=0)


def test_an_approximate_release_needs_a_budget_with_delta():
    with pytest.raises(ValueError, match=r"keys.*not pure DP.*epsilon=0\.5, delta=1e-07"):
        PrivacyBudget(epsilon=10.0).charge(Release.approximate(0.5, 1e-7, "keys"))


def test_a_budget_of_2_and_1e_6_holds_exactly_the_releases_the_rule_says():
    """Deltas add up and must stay within the budget's; epsilons by the smaller of basic composition and
    the zCDP rule (the approximate releases' epsilons plus the others' rho converted at what delta is left)."""
    budget = PrivacyBudget(epsilon=2.0, delta=1e-6)
    keys = Release.approximate(0.5, 4e-7, "keys")
    budget.charge(keys)
    budget.charge(keys)
    with pytest.raises(BudgetExceededError, match="which delta cannot hold"):
        budget.charge(Release.approximate(0.01, 4e-7, "keys"))  # 1.2e-6 of delta, though epsilon fits
    budget.charge(Release.exponential_mechanism(1.0, "top-k"))  # basic: 0.5 + 0.5 + 1 = 2, the whole budget
    assert budget.spent() == 2.0 < 1.0 + zcdp_to_epsilon(1 / 8, delta=2e-7)  # basic is the smaller here
    with pytest.raises(BudgetExceededError):
        budget.charge(Release.exponential_mechanism(1e-3, "one more"))
    assert len(budget.releases) == 3


def test_many_small_releases_beside_an_approximate_one_compose_by_zcdp():
    budget = PrivacyBudget(epsilon=2.0, delta=1e-6)
    budget.charge(Release.approximate(0.5, 5e-7, "keys"))
    for _ in range(30):
        budget.charge(Release.exponential_mechanism(0.1, "pick"))  # basic composition alone: 3.5
    assert budget.spent() == pytest.approx(0.5 + zcdp_to_epsilon(30 * 0.1**2 / 8, delta=5e-7), rel=1e-12)
    assert budget.spent() < 2.0


def test_a_zcdp_release_needs_delta_left_for_its_conversion():
    budget = PrivacyBudget(epsilon=5.0, delta=1e-6)
    budget.charge(Release.approximate(0.5, 1e-6, "keys"))  # all of delta
    budget.charge(Release.pure(0.5, "count"))  # basic composition needs no delta of its own
    with pytest.raises(BudgetExceededError):
        budget.charge(Release.zcdp(0.01, "gaussian"))  # no epsilon of its own, and no delta left to convert rho


def test_compose_adds_what_each_release_spends():
    quantiles, mwem = Release.exponential_mechanism(0.5, "edges"), Release.pure(1.5, "mwem")
    both = compose([quantiles, mwem], "run")
    assert (both.label, both.epsilon, both.rho, both.delta) == ("run", 2.0, 0.5**2 / 8 + 1.5**2 / 2, 0.0)
    aim = compose([Release.zcdp(0.1, "aim"), quantiles], "run")
    assert aim.epsilon is None and aim.rho == 0.1 + 0.5**2 / 8
    with pytest.raises(ValueError, match="at least one"):
        compose([], "run")


def test_a_zcdp_mechanism_beside_pure_releases_gets_the_larger_rho_of_the_two_routes_and_its_charge_fits():
    """At epsilon 1, delta 1e-9, an exponential mechanism of 0.3 is 0.01125-zCDP, 75% of the budget's rho: basic
    composition (the mechanism pure, the zCDP one converted at epsilon 0.7) leaves it 2.03 times more rho."""
    edges = [Release.exponential_mechanism(0.3, "edges")]
    share = zcdp_beside(1.0, 1e-9, edges, "aim")
    by_zcdp = epsilon_to_zcdp(1.0, delta=1e-9) - 0.3**2 / 8
    assert share.route == "basic" and share.rho == epsilon_to_zcdp(0.7, delta=1e-9)
    assert share.rho == pytest.approx(2.03 * by_zcdp, rel=0.01)
    assert share.release == Release.approximate(0.7, 1e-9, "aim")
    # Split over two columns' edges, 0.2 and 0.1 cost (0.04 + 0.01) / 8 in rho: the zCDP route leaves more
    split = [Release.exponential_mechanism(0.2, "edges of a"), Release.exponential_mechanism(0.1, "edges of b")]
    two = zcdp_beside(1.0, 1e-9, split, "aim")
    assert two.route == "zcdp" and two.rho == pytest.approx(epsilon_to_zcdp(1.0, delta=1e-9) - 0.05 / 8)
    assert two.rho > epsilon_to_zcdp(0.7, delta=1e-9) and two.release == Release.zcdp(two.rho, "aim")
    assert zcdp_beside(1.0, 1e-9, [], "aim").rho == epsilon_to_zcdp(1.0, delta=1e-9)
    for chosen, others in ((share, edges), (two, split)):
        budget = PrivacyBudget(epsilon=1.0, delta=1e-9)
        budget.charge(compose([chosen.release, *others], "run"))  # fits: one charge for the run
        assert budget.spent() == pytest.approx(1.0)
        with pytest.raises(BudgetExceededError):  # and nothing more does
            budget.charge(Release.exponential_mechanism(0.01, "more"))


def test_a_zcdp_mechanism_beside_releases_that_spend_the_budget_is_refused():
    with pytest.raises(ValueError, match="nothing is left for aim"):
        zcdp_beside(1.0, 1e-9, [Release.exponential_mechanism(1.0, "edges")], "aim")
    # an approximate release has no rho and is not pure: neither route holds it
    with pytest.raises(ValueError, match="nothing is left for aim"):
        zcdp_beside(1.0, 1e-6, [Release.approximate(0.1, 1e-7, "keys")], "aim")
