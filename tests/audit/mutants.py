"""Mutation testing of the privacy audit: plant known bugs one at a time and check that the audit fails.

    python tests/audit/mutants.py [NAME ...]      # make audit-mutants

Each mutant replaces one exact snippet (found exactly once) in one file of a scratch copy of the
repository. The tests it names run first (the checks meant to catch it); if they all pass, the
whole of tests/audit runs. A mutant that no test catches is a hole in the audit, and the command
exits 1. Before any mutant, the named tests must pass on the code as it is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTEST = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
TIMEOUT = 900  # seconds for one run of pytest: the whole audit takes a few minutes


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]  # the checks meant to catch it (pytest node ids from the repository's root)


PIPELINE = "tests/audit/test_audit_pipeline.py"
SHIPPED_SELECT = f"{PIPELINE}::test_select_as_shipped"
LEARN = "tests/audit/test_audit_learn.py"
QUANTILES = "tests/audit/test_audit_quantiles.py"
INPUT = "tests/audit/test_audit_input.py::test_each_unit_counts_min_k_of_its_valid_rows"
ROWS = "tests/audit/test_audit_rows.py"
KEYS = "tests/audit/test_audit_keys.py"
SENSITIVITY = "tests/audit/test_audit_sensitivity.py"
IDENTITY = "tests/audit/test_audit_identity.py"
LOGS = "tests/audit/test_audit_logs.py"
COUNTS_LINE = (
    '    _LOG.debug("non-private: read %d rows; %d rejected%s", counts["rows_read"], counts["dead_letter_rows"], '
    "clamps)"
)
SHIPPED_SYNTHESIZE = "tests/audit/test_audit_synthesize.py::test_synthesize_as_shipped_is_post_processing_of_its_draws"

MUTANTS = [
    Mutant(
        "top-k survivors take the noise at their position among all candidates (issue 12, item 1)",
        "beam_expmech/mechanisms/exact.py",
        "    prefix = prefix[kept]  # from here on, kept and prefix are aligned: position i is candidate kept[i]\n"
        "    order = _ordered(low, high, k)\n"
        "    if order is None:\n"
        "        # Some keys overlap: 32 more bits for the survivors, and screen them again.\n"
        "        prefix = prefix.astype(np.uint64)",
        "    order = _ordered(low, high, k)\n"
        "    if order is None:\n"
        "        # Some keys overlap: 32 more bits for the survivors, and screen them again.\n"
        "        prefix = prefix[kept].astype(np.uint64)",
        (SHIPPED_SELECT,),
    ),
    Mutant(
        "the same bug at the second screen: survivors keep the noise of other candidates (review 1)",
        "beam_expmech/mechanisms/exact.py",
        "        kept, prefix = kept[again], prefix[again]\n",
        "        kept = kept[again]\n",
        (f"{PIPELINE}::test_select_at_production_shard_sizes",),
    ),
    Mutant(
        "a float-only sampler: overlapping keys taken in index order, no exact step",
        "beam_expmech/mechanisms/exact.py",
        "return keys if order is not None else decide(keys, k, noise, source)",
        "return keys[:k]",
        (f"{PIPELINE}::test_scores_beyond_float_precision_are_sampled_exactly",),
    ),
    Mutant(
        "select's sensitivity off by one (K - 1)",
        "beam_expmech/releases/queries.py",
        "sensitivity=unit.rows * family.contribution,",
        "sensitivity=unit.rows * family.contribution - 1,",
        (SHIPPED_SELECT,),
    ),
    Mutant(
        "select's sensitivity halved",
        "beam_expmech/releases/queries.py",
        "sensitivity=unit.rows * family.contribution,",
        "sensitivity=unit.rows * family.contribution / 2,",
        (SHIPPED_SELECT,),
    ),
    Mutant(
        "top-k spends epsilon on every pick instead of epsilon / k",
        "beam_expmech/transforms/select.py",
        "monotonic=self.monotonic, rounds=self.k",
        "monotonic=self.monotonic, rounds=1",
        (SHIPPED_SELECT,),
    ),
    Mutant(
        "permute-and-flip charged at epsilon^2/8 zCDP (it is not bounded range)",
        "beam_expmech/transforms/select.py",
        "release = Release.exponential_mechanism if self.noise is Noise.GUMBEL else Release.pure",
        "release = Release.exponential_mechanism",
        (f"{PIPELINE}::test_select_charges_what_its_mechanism_spends",),
    ),
    Mutant(
        "noise from a seeded generator in production",
        "beam_expmech/mechanisms/randomness.py",
        "    if rng is None:\n        return RandomSource()",
        "    if rng is None:\n        return RandomSource(np.random.default_rng(0))",
        (f"{PIPELINE}::test_unseeded_selection_draws_fresh_os_randomness",),
    ),
    Mutant(
        "learn's sensitivity ignores the K rows per unit",
        "beam_expmech/releases/queries.py",
        "candidates=self.candidate_matrix(), max_rows=unit.rows,",
        "candidates=self.candidate_matrix(), max_rows=1,",
        (f"{LEARN}::test_learn_pmf_on_neighbouring_histograms[integer-grid]",),
    ),
    Mutant(
        "learn reads fractional weights as binary floats (0.1 is not 1/10)",
        "beam_expmech/halfspaces.py",
        "return Fraction(value.strip())",
        "return Fraction(float(value))",
        (f"{LEARN}::test_learn_final_step_against_the_ideal_mechanism[fractional-grid]",),
    ),
    Mutant(
        "learn sums in float64 beyond 2^53, where the order of the sum decides",
        "beam_expmech/halfspaces.py",
        "exact_type = np.float64 if largest_sum < _FLOAT64_EXACT else np.int64",
        "exact_type = np.float64",
        (f"{LEARN}::test_learn_final_step_against_the_ideal_mechanism[int64-weights]",),
    ),
    Mutant(
        "learn decides pi . x >= y in floats whose rounding depends on the patterns present (issue 12, item 2;"
        " caught through this machine's BLAS)",
        "beam_expmech/halfspaces.py",
        "fits = chunk @ x.T >= threshold",
        "fits = chunk / candidates.denominator @ x.T >= threshold / candidates.denominator",
        (f"{LEARN}::test_learn_pmf_on_neighbouring_histograms[fractional-file]",),
    ),
    Mutant(
        "independent quantiles spend epsilon on each quantile instead of epsilon / m",
        "beam_expmech/transforms/quantiles.py",
        "each = self.epsilon / len(self.quantiles)",
        "each = self.epsilon",
        (f"{QUANTILES}::test_release_step_follows_the_ideal_pmf[independent-grid0-histogram0]",),
    ),
    Mutant(
        "quantiles' sensitivity ignores the K rows per unit",
        "beam_expmech/releases/queries.py",
        "method=self.method, max_rows=unit.rows, seed=seed)",
        "method=self.method, max_rows=1, seed=seed)",
        (f"{QUANTILES}::test_release_step_follows_the_ideal_pmf[independent-grid0-histogram0]",),
    ),
    Mutant(
        "JointExp on a regrouped grid gets the wrong bin edges",
        "beam_expmech/transforms/quantiles.py",
        "coarse, edges[cuts], list(self.quantiles),",
        "coarse, edges[: coarse.size + 1], list(self.quantiles),",
        (f"{QUANTILES}::test_release_step_follows_the_ideal_pmf[joint-grid2-histogram2]",),
    ),
    Mutant(
        "JointExp's sensitivity K instead of 2K",
        "beam_expmech/mechanisms/joint_quantiles.py",
        "scale = Fraction(epsilon) / (4 * max_rows * den)",
        "scale = Fraction(epsilon) / (2 * max_rows * den)",
        (f"{QUANTILES}::test_joint_exp_pmf[1]",),
    ),
    Mutant(
        "bounding keeps K + 1 rows of a unit where it ranks by one sort",
        "beam_expmech/transforms/bounding.py",
        "    np.not_equal(group[k:], group[:-k], out=kept[k:])",
        "    np.not_equal(group[k + 1 :], group[: -k - 1], out=kept[k + 1 :])",
        ("tests/transforms/test_bounding.py::test_no_unit_contributes_more_than_k_rows",),
    ),
    Mutant(
        "bounding keeps K + 1 rows per unit where it ranks by lexsort (shared hash bits, tied priorities)",
        "beam_expmech/transforms/bounding.py",
        "    return order[_ranks(np.cumsum(new)) < k]",
        "    return order[_ranks(np.cumsum(new)) <= k]",
        ("tests/transforms/test_bounding.py::test_lowest_keeps_what_a_lexsort_keeps",),
    ),
    Mutant(
        "text units ranked by their hash alone where the unit column leaves after bounding (review 3, F3)",
        "beam_expmech/transforms/bounding.py",
        "        units = _text_units(table, self.unit_column)",
        "        units = None",
        (
            "tests/transforms/test_bounding.py::test_text_units_of_one_hash_stay_two_units_where_the_unit_column_is_dropped",
        ),
    ),
    Mutant(
        "bounding passes the unit column on as read, so KeyCounts counts distinct raw values (issue 34, item 1)",
        "beam_expmech/transforms/bounding.py",
        "    batch = batch.set_column(batch.schema.get_field_index(unit_column), unit_column, units)",
        "    pass",
        (f"{IDENTITY}::test_a_unit_spelled_many_ways_in_files_is_one_unit",),
    ),
    Mutant(
        "bounding builds on a graph that skips validation (issue 34, item 1)",
        "beam_expmech/transforms/bounding.py",
        "    missing = [c for c in columns if c not in validated]",
        "    missing = []",
        ("tests/transforms/test_bounding.py::test_a_graph_that_skips_validation_is_refused_when_built",),
    ),
    Mutant(
        "KeyCounts counts a unit that no bounding bounded (the review of issue 34: 1,894 releases in 2,000)",
        "beam_expmech/transforms/keys.py",
        "            if self.unit_column is not None:\n",
        "            if False:\n",
        ("tests/transforms/test_lineage.py::test_key_counts_refuse_a_unit_that_no_bounding_bounded",),
    ),
    Mutant(
        "a final step takes a sensitivity below the counts' bounding (issue 35's PrivateSelect(sensitivity=1))",
        "beam_expmech/transforms/lineage.py",
        "    if (bounds.sensitivity or 0) > sensitivity:",
        "    if False:",
        ("tests/transforms/test_lineage.py::test_a_selection_refuses_a_sensitivity_below_the_bounding",),
    ),
    Mutant(
        "bounded rows of two paths that meet pass as bounded once (the second review of issue 34: monthly exports)",
        "beam_expmech/transforms/lineage.py",
        '    if len(marked) > 1:\n        raise ValueError(f"{what}: rows bounded on',
        '    if len(marked) > 2:\n        raise ValueError(f"{what}: rows bounded on',
        ("tests/transforms/test_lineage.py::test_two_bounded_paths_that_meet_are_refused",),
    ),
    Mutant(
        "a run warns when rows were rejected (issue 34, item 2: the line tells of one person's bad row)",
        "beam_expmech/releases/passes.py",
        COUNTS_LINE,
        COUNTS_LINE + '\n    if counts["dead_letter_rows"]:\n        _LOG.warning("rows were rejected")',
        (f"{LOGS}::test_what_a_run_prints_at_info_is_the_same_on_neighbouring_data",),
    ),
    Mutant(
        "a run logs the rows it read at INFO (issue 34, item 2: an exact count beside a noisy one)",
        "beam_expmech/releases/passes.py",
        COUNTS_LINE,
        '    _LOG.info("read %d rows; %d rejected%s", counts["rows_read"], counts["dead_letter_rows"], clamps)',
        (f"{LOGS}::test_what_a_run_prints_at_info_is_the_same_on_neighbouring_data",),
    ),
    Mutant(
        "bounding misses priorities that tie at a unit's threshold in their top bits (review 3, F3)",
        "beam_expmech/transforms/bounding.py",
        "    if boundary.size and np.any((words[boundary] ^ words[boundary - 1]) >> np.uint64(index_bits) == 0):",
        "    if False:",
        (
            "tests/transforms/test_bounding.py::test_lowest_ranks_priorities_that_share_their_top_bits_by_all_their_bits",
        ),
    ),
    Mutant(
        "bounding takes two units for one where they share the hash bits of its sort word",
        "beam_expmech/transforms/bounding.py",
        "    if np.count_nonzero(grouped[1:] != grouped[:-1]) != np.count_nonzero(group[1:] != group[:-1]):",
        "    if False:",
        ("tests/transforms/test_bounding.py::test_lowest_tells_apart_units_a_bit_apart_among_hashes_far_apart",),
    ),
    Mutant(
        "a null unit hashed: one null turns a batch's integer units to floats (review 3, F1)",
        "beam_expmech/transforms/bounding.py",
        "    if units.null_count:  # a null is no unit; and to numpy, a column with one would turn to floats",
        "    if False:",
        ("tests/transforms/test_bounding.py::test_a_null_unit_is_refused_not_hashed",),
    ),
    Mutant(
        "two text units of one hash bounded as one (their rows are not compared)",
        "beam_expmech/transforms/bounding.py",
        "    if units is not None and _units_differ(units, order, group):",
        "    if False:",
        ("tests/transforms/test_bounding.py::test_text_units_of_one_hash_are_still_two_units",),
    ),
    Mutant(
        "rows of no candidate spend a unit's K rows (compact_rows after bounding, not before)",
        "beam_expmech/releases/passes.py",
        "        return beam.Map(self.family.compact_rows) | BoundContributions(\n"
        "            unit.column, unit.max_rows, seed=reading.seed, shards=shards(reading.files), keep_unit=False\n"
        "        )",
        "        return BoundContributions(\n"
        "            unit.column, unit.max_rows, seed=reading.seed, shards=shards(reading.files), keep_unit=False\n"
        "        ) | beam.Map(self.family.compact_rows)",
        (f"{INPUT}[outside_candidates]",),
    ),
    Mutant(
        "AIM scores a projection that is not finite (NaN wraps the error: review 8)",
        "beam_expmech/synth/aim.py",
        "projected = np.nan_to_num(model.project(r).ravel(), nan=0.0, posinf=0.0, neginf=0.0)",
        "projected = model.project(r).ravel()",
        ("tests/synth/test_aim.py::test_a_model_that_is_not_finite_leaves_the_scores_within_their_sensitivity",),
    ),
    Mutant(
        "AIM's small-data rule reads the true size, not the noisy 1-ways",
        "beam_expmech/synth/aim.py",
        "error = one_way_error(run.domain, rows=_total(run.measurements), rho=rho, max_rows=run.max_rows)",
        "error = one_way_error(run.domain, rows=sum(t.sum() for t in run.truth.values()), rho=rho, "
        "max_rows=run.max_rows)",
        ("tests/synth/test_aim.py::test_the_small_data_rule_reads_the_noisy_measurements_never_the_true_counts",),
    ),
    Mutant(
        "AIM's 1-way share reads one true marginal's size, not the noisy 1-ways",
        "beam_expmech/synth/aim.py",
        "error = one_way_error(run.domain, rows=_total(run.measurements), rho=rho, max_rows=run.max_rows)",
        "error = one_way_error(run.domain, rows=float(next(iter(run.truth.values())).sum()), rho=rho, "
        "max_rows=run.max_rows)",
        (f"{SHIPPED_SYNTHESIZE}[aim, public grids, epsilon 2]",),
    ),
    Mutant(
        "AIM merges rare codes by the true counts, not the noisy 1-ways",
        "beam_expmech/synth/aim.py",
        "estimates[c] = sum(m.values / m.sigma**2 for m in measured) / weight",
        "estimates[c] = self.truth[(c,)].astype(float)",
        ("tests/synth/test_aim.py::test_rare_codes_are_merged_from_the_noisy_one_ways_never_the_true_counts",),
    ),
    Mutant(
        "AIM spreads merged codes by the true counts, not the noisy 1-ways",
        "beam_expmech/synth/aim.py",
        "        if not compression.merges():\n            return\n",
        "        if not compression.merges():\n            return\n"
        "        true = {c: self.truth[(c,)] + 1e-12 for c in estimates}\n"
        "        compression.within.update({c: t / np.bincount(compression.codes[c], weights=t)[compression.codes[c]]"
        " for c, t in true.items()})\n",
        (
            "tests/audit/test_audit_synthesis.py::test_aim_merged_codes_and_their_spread_are_the_same_on_neighbouring_data",
            SHIPPED_SYNTHESIZE,
            "tests/synth/test_aim.py::test_rare_codes_are_merged_from_the_noisy_one_ways_never_the_true_counts",
        ),
    ),
    Mutant(
        "auto chooses its generator by the true row count, not the released one",
        "beam_expmech/synth/choice.py",
        "    z = max(noisy, 0.0) * math.sqrt(2 * rho) / max_rows",
        "    z = rows * math.sqrt(2 * rho) / max_rows",
        ("tests/synth/test_choice.py::test_the_choice_reads_the_released_count_never_the_true_one",),
    ),
    Mutant(
        "auto's independent 1-ways spend all of epsilon beside the count",
        "beam_expmech/synth/choice.py",
        "epsilon=epsilon - count_epsilon,",
        "epsilon=epsilon,",
        ("tests/synth/test_choice.py",),
    ),
    Mutant(
        "auto's AIM gets all of rho beside the count",
        "beam_expmech/synth/choice.py",
        "return count_epsilon, rho - count_epsilon**2 / 2",
        "return count_epsilon, rho",
        ("tests/synth/test_choice.py",),
    ),
    Mutant(
        "auto's count is handed all of epsilon (review: the kept list of releases still said its share)",
        "beam_expmech/synth/choice.py",
        "np.array([rows]), epsilon=count_epsilon,",
        "np.array([rows]), epsilon=epsilon,",
        ("tests/synth/test_choice.py::test_what_the_mechanisms_are_told_to_spend_adds_up_to_the_charge",),
    ),
    Mutant(
        "auto's 1-ways are each handed all of the rest of epsilon",
        "beam_expmech/synth/choice.py",
        "aim.marginal_from(marginals, (column,)), epsilon=share,",
        "aim.marginal_from(marginals, (column,)), epsilon=epsilon,",
        ("tests/synth/test_choice.py::test_what_the_mechanisms_are_told_to_spend_adds_up_to_the_charge",),
    ),
    Mutant(
        "auto's count ignores its cap of a fiftieth of epsilon where delta is large (review 2)",
        "beam_expmech/synth/choice.py",
        "    return count_epsilon, rho - count_epsilon**2 / 2",
        "    return math.sqrt(2 * COUNT_SHARE * rho), rho - count_epsilon**2 / 2",
        ("tests/synth/test_choice.py::test_what_the_mechanisms_are_told_to_spend_adds_up_to_the_charge",),
    ),
    Mutant(
        "auto's 1-ways are told a sensitivity of 1 whatever K",
        "beam_expmech/synth/choice.py",
        "epsilon=share, sensitivity=max_rows, rng=source",
        "epsilon=share, sensitivity=1, rng=source",
        (f"{SHIPPED_SYNTHESIZE}[auto: independent 1-ways, public grids, two workers]",),
    ),
    Mutant(
        "auto's posterior medians read the true 1-ways, not the noisy ones",
        "beam_expmech/synth/choice.py",
        "    medians = posterior_medians(noisy, scales, rows=rows)",
        "    medians = posterior_medians({c: aim.marginal_from(marginals, (c,)) for c in noisy}, scales, rows=rows)",
        (f"{SHIPPED_SYNTHESIZE}[auto: independent 1-ways, public grids, two workers]",),
    ),
    Mutant(
        "auto's posterior medians read the true row count (review: the rows drawn were the same on D and D')",
        "beam_expmech/synth/choice.py",
        "    medians = posterior_medians(noisy, scales, rows=rows)",
        "    medians = posterior_medians(noisy, scales, rows=float(next(iter(marginals.values())).sum()))",
        (f"{SHIPPED_SYNTHESIZE}[auto: independent 1-ways, public grids, two workers]",),
    ),
    Mutant(
        "auto chooses naive Bayes by the true row count, not the released one (review)",
        "beam_expmech/synth/choice.py",
        "    if target is not None and z < SMALL_Z_TARGET:",
        "    if target is not None and rows * math.sqrt(2 * rho) / max_rows < SMALL_Z_TARGET:",
        ("tests/synth/test_choice.py::test_the_choice_reads_the_released_count_never_the_true_one",),
    ),
    Mutant(
        "auto's target 2-ways are told a sensitivity of 1 whatever K",
        "beam_expmech/synth/naive_bayes.py",
        "epsilon=share, sensitivity=max_rows,",
        "epsilon=share, sensitivity=1,",
        (f"{SHIPPED_SYNTHESIZE}[auto with a target: naive bayes, private age edges, two workers]",),
    ),
    Mutant(
        "auto's target 2-ways are each handed all of the rest of epsilon",
        "beam_expmech/synth/naive_bayes.py",
        "epsilon=share, sensitivity=max_rows,",
        "epsilon=epsilon, sensitivity=max_rows,",
        ("tests/synth/test_choice.py::test_what_the_mechanisms_are_told_to_spend_adds_up_to_the_charge",),
    ),
    Mutant(
        "naive bayes draws each column given the target from its true 2-way counts",
        "beam_expmech/synth/naive_bayes.py",
        "given[column] = normalised(np.maximum(noisy, 0)",
        "given[column] = normalised(np.maximum(marginal_from(marginals, columns), 0)",
        (f"{SHIPPED_SYNTHESIZE}[auto with a target: naive bayes, private age edges, two workers]",),
    ),
    Mutant(
        "naive bayes's target marginal is its true counts",
        "beam_expmech/synth/naive_bayes.py",
        "target_sums.append(noisy.sum(axis=1))",
        "target_sums.append(marginal_from(marginals, columns).sum(axis=1))",
        (f"{SHIPPED_SYNTHESIZE}[auto with a target: naive bayes, private age edges, two workers]",),
    ),
    Mutant(
        "synthesize draws as many rows as the data's true count, not its noisy estimate",
        "beam_expmech/transforms/synthesis.py",
        "rows = self.rows or min(result.rows, self.max_synthetic_rows)",
        "rows = self.rows or min(int(workload[next(iter(workload))].sum()), self.max_synthetic_rows)",
        (SHIPPED_SYNTHESIZE,),
    ),
    Mutant(
        "merged codes count a row twice",
        "beam_expmech/synth/compression.py",
        "np.add.at(merged, self.codes[column], moved)",
        "np.add.at(merged, self.codes[column], 2 * moved)",
        ("tests/audit/test_audit_synthesis.py::test_aim_selection_on_merged_codes_on_neighbouring_data",),
    ),
    Mutant(
        "bounding keeps L + 1 keys per unit",
        "beam_expmech/transforms/bounding.py",
        "kept_pair = _key_ranks(pair_unit, pair_priority, pair_key, keys.dictionary, max_keys) < max_keys",
        "kept_pair = _key_ranks(pair_unit, pair_priority, pair_key, keys.dictionary, max_keys) <= max_keys",
        # The audit's sensitivity test on Beam (3 examples) misses it; the bound's own test (60) does not.
        ("tests/transforms/test_bounding.py::test_no_unit_exceeds_k_rows_or_l_keys",),
    ),
    Mutant(
        "an Avro unit of several types read as its text (review 2, findings 3 and 4)",
        "beam_expmech/io/readers.py",
        "inexact = [c for c in identities if c in read_as_text]",
        "inexact = []",
        ("tests/audit/test_audit_input.py::test_a_unit_column_of_several_avro_types_is_refused_before_any_budget",),
    ),
    Mutant(
        "a dead-letter row that still counts",
        "beam_expmech/io/validation.py",
        "good = pa.RecordBatch.from_arrays([c.filter(good_rows) for c in clean], names=names)",
        "good = pa.RecordBatch.from_arrays(clean, names=names)",
        (f"{INPUT}[avro_units]",),
    ),
    Mutant(
        "a code above its column's domain counted in the cell its wrap lands in (joint cells by Horner's rule)",
        "beam_expmech/predicates.py",
        "outside |= (codes < 0) | (codes >= size)",
        "outside |= codes < 0",
        ("tests/test_predicates.py::test_marginal_counts",),
    ),
    Mutant(
        "a float column with a domain: one NaN hides every other value outside it, which wraps into a code (review 10)",
        "beam_expmech/io/validation.py",
        'if self.domain is not None and self.kind != "int":',
        "if False:",
        ("tests/io/test_validation.py::test_a_domain_goes_with_integer_codes_only_and_every_value_outside_it_is_dead",),
    ),
    Mutant(
        "a value on a histogram edge counted a bin low, where the product rounded it (review 11)",
        "beam_expmech/predicates.py",
        "near = np.flatnonzero((position < self._rounding) | (position > 1 - self._rounding))",
        "near = np.zeros(0, np.intp)",
        (
            "tests/test_predicates.py::test_a_value_on_a_histogram_edge_is_in_the_bin_its_label_names",
            "tests/audit/test_audit_quantiles.py::test_the_graph_places_values_on_edges_in_the_bins_their_edges_name",
        ),
    ),
    Mutant(
        "-0.0 and 0.0 as two units (issue 12, item 5)",
        "beam_expmech/io/validation.py",
        "values = pc.add(pc.cast(column, pa.float64()), 0.0)",
        "values = pc.cast(column, pa.float64())",
        (f"{INPUT}[float_units]",),
    ),
    Mutant(
        "an unclosed quote in one person's CSV line swallows the lines after it",
        "beam_expmech/io/csv_reader.py",
        "if parsed is None or parsed[0].num_rows + len(parsed[1]) != numbers.size:",
        "if parsed is None:",
        (f"{INPUT}[csv_unclosed_quotes]",),
    ),
    Mutant(
        'rows: a unit of another type than its declared one counts as a unit of its own (5 and "5")',
        "beam_expmech/transforms/rows.py",
        "if identity is not None and not kinds <= {identity, type(None)}:",
        "if False:",
        (f"{ROWS}::test_each_unit_counts_min_k_of_its_valid_rows[int]",),
    ),
    Mutant(
        "rows: a unit 5 in a dict is built as text, not the unit 5 of a file's integer column",
        "beam_expmech/transforms/rows.py",
        "arrays.append(pa.array(values, PLAIN_TYPES[kind]))",
        "arrays.append(pa.array([None if v is None else str(v) for v in values]) if kind is int else "
        "pa.array(values, PLAIN_TYPES[kind]))",
        (f"{ROWS}::test_a_unit_from_rows_is_the_same_unit_read_from_a_file[int]",),
    ),
    Mutant(
        "rows: a dead-letter reason quotes the value",
        "beam_expmech/transforms/rows.py",
        'flag(f"{spec.name}: {problem}", mask)',
        'flag(f"{spec.name}: {problem} {[v for v, m in zip(values, mask) if m][:1]}", mask)',
        ("tests/transforms/test_rows.py::test_bad_rows_go_to_the_dead_letter_with_reasons_that_quote_no_value",),
    ),
    Mutant(
        "a uint64 unit beyond int64 wraps onto another person's unit (review 2, finding 4)",
        "beam_expmech/io/validation.py",
        'problems.append(("out of the 64-bit range", _mask(pc.greater(column, pa.scalar(2**63 - 1, column.type)))))',
        "pass",
        ("tests/io/test_validation.py::test_a_uint64_identity_beyond_int64_is_rejected_never_wrapped_onto_another",),
    ),
    Mutant(
        "quantiles charged epsilon / m (the ledger under-charges m times; review 1)",
        "beam_expmech/transforms/quantiles.py",
        "return Release.exponential_mechanism(self.epsilon, f",
        "return Release.exponential_mechanism(self.epsilon / len(self.quantiles), f",
        ("tests/audit/test_audit_charges.py::test_quantiles_charge_covers_its_final_step",),
    ),
    Mutant(
        "learn charged half its epsilon",
        "beam_expmech/transforms/halfspace.py",
        'return Release.exponential_mechanism(self.epsilon, f"halfspace',
        'return Release.exponential_mechanism(self.epsilon / 2, f"halfspace',
        ("tests/audit/test_audit_charges.py::test_learn_charge_covers_its_final_step",),
    ),
    Mutant(
        "JointExp's proposal relative to 0, not to the best chain: acceptance (and time) falls with n (item 4)",
        "beam_expmech/mechanisms/joint_quantiles.py",
        "    best = int(chain.min())\n",
        "    best = 0\n",
        ("tests/mechanisms/test_joint_quantiles.py::test_a_draw_takes_about_one_proposal_whatever_the_data",),
    ),
    Mutant(
        "AIM claims a monotone score (its score is an error, not a count)",
        "beam_expmech/synth/aim.py",
        "epsilon=epsilon, sensitivity=sensitivity, rng=rng)",
        "epsilon=epsilon, sensitivity=sensitivity, monotonic=True, rng=rng)",
        ("tests/audit/test_audit_synthesis.py::test_aim_selection_sampler",),
    ),
    Mutant(
        "MWEM claims a monotone score",
        "beam_expmech/synth/mwem.py",
        "exponential_mechanism(scores, epsilon=epsilon, sensitivity=sensitivity, rng=rng)",
        "exponential_mechanism(scores, epsilon=epsilon, sensitivity=sensitivity, monotonic=True, rng=rng)",
        ("tests/audit/test_audit_synthesis.py::test_mwem_selection_sampler",),
    ),
    Mutant(
        "limited domain: bottom without its K above the (kbar + 1)-th count",
        "beam_expmech/mechanisms/limited_domain.py",
        "scores = np.append(counts.astype(np.int64), int(next_count) + max_rows)",
        "scores = np.append(counts.astype(np.int64), int(next_count))",
        (f"{KEYS}::test_limited_domain_sampler_follows_its_definition",),
    ),
    Mutant(
        "limited domain: bottom's margin ignores the L keys a unit can bring into the top kbar",
        "beam_expmech/mechanisms/limited_domain.py",
        "gmpy2.mpz(min(max_keys, kbar) * k)",
        "gmpy2.mpz(k)",
        (f"{KEYS}::test_limited_domain_sampler_follows_its_definition",),
    ),
    Mutant(
        "partition selection: each of a unit's L keys at the whole epsilon",
        "beam_expmech/mechanisms/partition_selection.py",
        "_envelope(Fraction(self.epsilon) / self.max_keys, Fraction(self.delta) / self.max_keys)",
        "_envelope(Fraction(self.epsilon), Fraction(self.delta) / self.max_keys)",
        (f"{KEYS}::test_partition_selection_rule_is_the_optimal_one_and_keeps_both_inequalities",),
    ),
    Mutant(
        "partition selection: the release probabilities rounded up",
        "beam_expmech/mechanisms/partition_selection.py",
        "numerator = p.numerator * one // p.denominator",
        "numerator = -(-p.numerator * one // p.denominator)",
        (f"{KEYS}::test_partition_selection_rule_is_the_optimal_one_and_keeps_both_inequalities",),
    ),
    Mutant(
        "gaussian thresholding: the noise calibrated for one key a unit (L2 sensitivity 1, not sqrt(L))",
        "beam_expmech/mechanisms/gaussian_thresholding.py",
        "sigma2 = Fraction(max_keys) / (2 * Fraction(rho))",
        "sigma2 = Fraction(1) / (2 * Fraction(rho))",
        (f"{KEYS}::test_gaussian_thresholding_is_the_gaussian_mechanism_thresholded",),
    ),
    Mutant(
        "gaussian thresholding: the threshold pays for one new key a unit, not L",
        "beam_expmech/mechanisms/gaussian_thresholding.py",
        "if max_keys * tail <= budget:",
        "if tail <= budget:",
        (f"{KEYS}::test_partition_selection_is_epsilon_delta_dp",),
    ),
    Mutant(
        "gaussian thresholding: the tail's lower bound not divided by the normaliser",
        "beam_expmech/mechanisms/gaussian_thresholding.py",
        "return self.suffix_down[min(m, len(self.suffix_down) - 1)] / self.total_up",
        "return self.suffix_down[min(m, len(self.suffix_down) - 1)]",
        (f"{KEYS}::test_gaussian_thresholding_is_the_gaussian_mechanism_thresholded",),
    ),
    Mutant(
        "KeyCounts: a key shard sums one batch's totals, not every batch's (the shuffle of encoded parts)",
        "beam_expmech/transforms/keys.py",
        "        tables.append(decode_rows(part))",
        "        tables = [decode_rows(part)]",
        ("tests/transforms/test_keys.py::test_key_counts_are_each_keys_rows_and_distinct_units_whatever_the_shards",),
    ),
    Mutant(
        "KeyCounts: a key shard holds every batch's part decoded, not its keys' totals (review of the bytes shuffle)",
        "beam_expmech/transforms/keys.py",
        "        if held > max(_COMPACT_ROWS, growth * tables[0].num_rows):",
        "        if False:",
        ("tests/transforms/test_keys.py::test_a_shard_holds_its_distinct_keys_not_every_batchs_part_of_them",),
    ),
    Mutant(
        "keys then laplace: noise for one row a unit (sensitivity 1, not K)",
        "beam_expmech/transforms/keys.py",
        "to_numpy(), epsilon=self.rest, sensitivity=self.max_rows,",
        "to_numpy(), epsilon=self.rest, sensitivity=1,",
        (f"{KEYS}::test_the_command_lines_key_selection_follows_its_definition",),
    ),
    Mutant(
        "keys then laplace: the second stage spends the whole epsilon again",
        "beam_expmech/transforms/keys.py",
        "noisy = discrete_laplace_mechanism(kept.column(ROWS).to_numpy(), epsilon=self.rest,",
        "noisy = discrete_laplace_mechanism(kept.column(ROWS).to_numpy(), epsilon=self.epsilon,",
        (f"{KEYS}::test_the_command_lines_key_selection_follows_its_definition",),
    ),
    Mutant(
        "bounding with keys: the final cut to K rows a unit left out (K rows a key, L K in all)",
        "beam_expmech/transforms/bounding.py",
        "            positions, hashes, priorities = positions[kept], hashes[kept], priorities[kept]",
        "            return positions[kept[np.argsort(hashes[kept], kind='stable')]]",
        (f"{SENSITIVITY}::test_one_more_unit_moves_at_most_l_keys_by_at_most_k_rows_and_one_unit",),
    ),
    Mutant(
        "select keys: each shard sends its kbar largest, not kbar + 1 (bottom misses the next count)",
        "beam_expmech/transforms/keys.py",
        "return largest(table, self.kbar + 1)",
        "return largest(table, self.kbar)",
        (f"{KEYS}::test_the_command_lines_key_selection_follows_its_definition",),
    ),
    Mutant(
        "select keys: partition selection spends the whole epsilon, not its share",
        "beam_expmech/transforms/keys.py",
        "self.keys = PrivateKeys(epsilon=self.epsilon * self.keys_share,",
        "self.keys = PrivateKeys(epsilon=self.epsilon,",
        (f"{KEYS}::test_the_command_lines_key_selection_follows_its_definition",),
    ),
    Mutant(
        "select keys: the exponential mechanism after partition selection spends the whole epsilon too",
        "beam_expmech/transforms/keys.py",
        "top_k(rows, min(self.k, len(candidates)), epsilon=self.rest,",
        "top_k(rows, min(self.k, len(candidates)), epsilon=self.epsilon,",
        (f"{KEYS}::test_the_command_lines_key_selection_follows_its_definition",),
    ),
    Mutant(
        "limited domain: bottom sized by the keys found, not the public kbar (review 4, finding 1)",
        "beam_expmech/mechanisms/limited_domain.py",
        "log_measure[-1] = bottom_log_measure(k=k, kbar=kbar,",
        "log_measure[-1] = bottom_log_measure(k=k, kbar=counts.size,",
        (f"{KEYS}::test_limited_domain_sampler_follows_its_definition",),
    ),
    Mutant(
        "synthesize: private bin edges drawn as if each unit held one row (review 5, finding 2)",
        "beam_expmech/releases/synthesis.py",
        "max_rows=self.unit.rows, seed=self.seed)",
        "max_rows=1, seed=self.seed)",
        ("tests/pipelines/test_synthesize.py::test_private_edges_with_a_unit_are_the_quantiles_of_k_rows_a_unit",),
    ),
]


def tracked_copy(destination: Path) -> None:
    """The repository's files as git knows them (tracked and untracked, not ignored) in ``destination``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def occurrences(mutant: Mutant, tree: Path = ROOT) -> int:
    """How often the mutant's snippet stands in its file: it plants its bug only where this is 1."""
    return (tree / mutant.path).read_text().count(mutant.old)


def apply(mutant: Mutant, tree: Path) -> None:
    found = occurrences(mutant, tree)
    if found != 1:
        raise SystemExit(f"mutant {mutant.name!r}: its snippet occurs {found} times in {mutant.path}, not once")
    path = tree / mutant.path
    path.write_text(path.read_text().replace(mutant.old, mutant.new))


def failing(tests: list[str], tree: Path) -> str | None:
    """The first of ``tests`` that fails in ``tree`` (None if all pass); one that runs past TIMEOUT
    seconds fails too (a mutant may make a sampler that never ends)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    for test in tests:
        try:
            run = subprocess.run([*PYTEST, test], cwd=tree, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return f"{test} (timed out)"
        if run.returncode not in (0, 5):
            return test
    return None


def main(names: list[str]) -> int:
    chosen = [m for m in MUTANTS if not names or m.name in names or any(n in m.name for n in names)]
    with tempfile.TemporaryDirectory() as scratch:
        clean = Path(scratch) / "repo"
        clean.mkdir()
        tracked_copy(clean)
        misplaced = [m.name for m in chosen if occurrences(m, clean) != 1]
        if misplaced:
            print(f"these mutants' snippets are not found exactly once: {misplaced}", file=sys.stderr)
            return 1
        named = sorted({t for m in chosen for t in m.tests})
        broken = failing(named, clean)
        if broken:
            print(f"the audit fails on the code as it is ({broken}): fix that first", file=sys.stderr)
            return 1
        rows, survivors = [], 0
        for mutant in chosen:
            start = time.monotonic()
            with tempfile.TemporaryDirectory() as other:
                tree = Path(other) / "repo"
                shutil.copytree(clean, tree, symlinks=True)
                apply(mutant, tree)
                caught = failing(list(mutant.tests), tree) or failing(["tests/audit"], tree)
            survivors += caught is None
            rows.append((mutant.name, mutant.path, caught or "SURVIVED", time.monotonic() - start))
            print(f"{mutant.name}: {caught or 'SURVIVED'}", file=sys.stderr, flush=True)
    header = ("mutant", "planted in", "caught by")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    print("  ".join(f"{h:<{w}}" for h, w in zip(header, widths, strict=True)) + "  seconds")
    for *text, seconds in rows:
        print("  ".join(f"{t:<{w}}" for t, w in zip(text, widths, strict=True)) + f"  {seconds:>7.0f}")
    print(f"{len(rows) - survivors} of {len(rows)} mutants caught")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
