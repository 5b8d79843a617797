"""Keys found in the data: per-key counts across shards, and the private steps that release keys.

    KeyCounts       col: RecordBatch -> col: (key shard, Table[key, rows, units]), each key's totals
    PrivateTopKeys  col: (key shard, Table) -> col: [key, ...]: the top k keys, limited domain or keys first
    PrivateKeys     col: (key shard, Table) -> col: (key shard, Table): the keys partition selection keeps

No step holds every key decoded: keys are spread over shards by a stable hash, each batch's totals of a
shard's keys cross the shuffle as bytes (``encode_rows``), each shard's are summed by one pyarrow
group-by, and the top-k step gathers only each shard's k largest
noisy counts (keys-then-laplace), released keys (keys-then-exponential) or kbar + 1 largest counts.
A key's ``rows`` is its number of rows, ``units`` its number of distinct privacy units (rows when
each row is its own unit). The input is bounded (``BoundContributions``, K rows and L
keys per unit) and holds every row of a unit in one batch, so distinct units add up over batches.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_expmech import parameters
from beam_expmech.accounting import Release
from beam_expmech.mechanisms.discrete_laplace import discrete_laplace_mechanism
from beam_expmech.mechanisms.exponential import top_k
from beam_expmech.mechanisms.limited_domain import limited_domain_top_k, margin
from beam_expmech.mechanisms.partition_selection import PartitionSelection
from beam_expmech.mechanisms.randomness import stream_source
from beam_expmech.transforms import lineage
from beam_expmech.transforms.bounding import decode_rows, encode_rows, require_validated, unit_hash

KEY, ROWS, UNITS = "key", "rows", "units"
_COMPACT_ROWS = 1 << 17  # rows a key shard holds before it sums them (shard_key_totals)
_NOISE_STREAMS = 1 << 32  # the test streams of the second stage's noise, one a shard (partition selection: 1 + shard)


def key_totals(table: pa.Table) -> pa.Table:
    """One row per key: its rows and units summed, in one chunk a column."""
    totals = table.group_by(KEY).aggregate([(ROWS, "sum"), (UNITS, "sum")])
    return totals.rename_columns([KEY, ROWS, UNITS]).combine_chunks()


def shard_key_totals(shard: int, parts: Iterable[bytes]) -> tuple[int, pa.Table]:
    """col: (key shard, [bytes]) -> col: (key shard, Table[key, rows, units]): the shard's parts
    (``batch_key_counts``) decoded and summed per key as they come, summed again whenever the rows held
    outgrow the totals so far twice over: memory for the shard's distinct keys, not for every batch's part
    (a key found in every batch is one row, not one a batch). Where a sum hardly shrinks them (keys found
    once), the next waits for 8 times the totals: each sum is a group-by of every row held."""
    tables, held, growth = [], 0, 2
    for part in parts:
        tables.append(decode_rows(part))
        held += tables[-1].num_rows
        if held > max(_COMPACT_ROWS, growth * tables[0].num_rows):
            tables = [key_totals(pa.concat_tables(tables))]
            growth, held = (2 if 2 * tables[0].num_rows <= held else 8), tables[0].num_rows
    return shard, key_totals(pa.concat_tables(tables)) if tables else _empty()


def _empty() -> pa.Table:
    return pa.table({KEY: pa.array([], pa.string()), ROWS: pa.array([], pa.int64()), UNITS: pa.array([], pa.int64())})


def batch_key_counts(
    batch: pa.RecordBatch, key_column: str, unit_column: str | None, shards: int
) -> Iterable[tuple[int, bytes]]:
    """col: RecordBatch -> col: (key shard, bytes): one batch's own totals per key, split by shard, each
    shard's as ``encode_rows`` encodes it to cross the shuffle (bytes the runner copies, rather than a
    table it pickles and holds decoded: 3 * 10^7 distinct keys took the DirectRunner past 5 GB so).

    Units are told apart as bounding tells them (it leaves the unit column in ``canonical_identity``'s form, one
    value a unit). The group-by runs on a table of the library's own column names, so that no user column's
    name can collide with the names of its outputs."""
    if batch.column(key_column).null_count:  # a null has no label to release, and no order beside text
        raise ValueError(f"KeyCounts needs {key_column} without nulls: route them to a dead letter (ValidateBatches)")
    table = pa.table({KEY: batch.column(key_column)})
    if unit_column is None:
        counted = table.group_by(KEY).aggregate([([], "count_all")])
        units = counted.column("count_all")
    else:
        table = table.append_column(UNITS, batch.column(unit_column))
        counted = table.group_by(KEY).aggregate([([], "count_all"), (UNITS, "count_distinct")])
        units = counted.column(f"{UNITS}_count_distinct")
    counted = pa.RecordBatch.from_arrays(
        [counted.column(KEY).combine_chunks(), *(pc.cast(c, pa.int64()).combine_chunks()
                                                 for c in (counted.column("count_all"), units))],
        names=[KEY, ROWS, UNITS],
    )  # fmt: skip
    for shard, part in by_key_shard(counted, shards):
        yield shard, encode_rows(pa.Table.from_batches([part]))


def by_key_shard(batch: pa.RecordBatch, shards: int) -> Iterable[tuple[int, pa.RecordBatch]]:
    """(shard, the batch's rows of that shard, a slice): a key's stable hash picks its shard."""
    shard = (unit_hash(batch.column(KEY)) % np.uint64(shards)).astype(np.uint16)
    order = np.argsort(shard, kind="stable")  # a radix sort for 16-bit keys
    bounds = np.searchsorted(shard[order], np.arange(shards + 1))
    batch = batch.take(pa.array(order))  # one take, then a slice a shard
    for s in range(shards):
        if bounds[s + 1] > bounds[s]:
            yield s, batch.slice(bounds[s], bounds[s + 1] - bounds[s])


class KeyCounts(beam.PTransform):
    """Each value of ``key_column`` (text) with its rows and distinct units, spread over ``shards``.

    col: RecordBatch -> col: (key shard, Table[key, rows, units]). Not private on its own: only a private
    step may follow. Refused when the graph is built unless its input is validated, and either bounded by
    ``BoundContributions(unit_column, K, key_column=key_column, max_keys=L)`` on every path (and
    ``unit_column`` then names that unit), or bounded on no path and ``unit_column`` None (each row its own
    unit); its output carries those bounds, which PrivateTopKeys and PrivateKeys check theirs against.
    """

    def __init__(self, key_column: str, *, unit_column: str | None = None, shards: int = 32):
        super().__init__()
        self.key_column, self.unit_column = key_column, unit_column
        self.shards = parameters.count(shards, "shards")

    def expand(self, batches):
        kinds = require_validated(batches, [self.key_column, *([self.unit_column] if self.unit_column else [])], "Keys")
        if kinds[self.key_column] != "string":  # bounding ranks keys by canonical_identity: for text, the text
            raise ValueError(f"Keys: column {self.key_column!r} must be validated as kind 'string' (keys are text)")
        counts = (
            batches
            | "PerBatch" >> beam.FlatMap(batch_key_counts, self.key_column, self.unit_column, self.shards)
            | "Group" >> beam.GroupByKey()  # col: (key shard, [bytes]): every batch's totals of the shard's keys
            | "PerKey" >> beam.MapTuple(shard_key_totals)  # col: (key shard, Table of complete totals)
        )
        return lineage.mark(counts, lineage.COUNTED, self._bounds(lineage.the_one(batches, lineage.BOUNDED, "Keys")))

    def _bounds(self, bounded: lineage.Bounds | None) -> lineage.Bounds:
        """The bounds of the counts, from the bounding above: a unit counted by another rule than bounding's
        (no unit column, another one, keys of another column) would move the counts beyond them."""
        if bounded is None:
            if self.unit_column is not None:
                raise ValueError(f"Keys: no BoundContributions by {self.unit_column!r} above: a unit's rows are not "
                                 "bounded (bound them with key_column and max_keys, or leave unit_column out: each row "
                                 "its own unit)")  # fmt: skip
            return lineage.Bounds(None, 1, self.key_column, 1)
        if self.unit_column != bounded.unit:
            raise ValueError(f"Keys: the rows are bounded by unit {bounded.unit!r}: count distinct units of it "
                             f"(unit_column={bounded.unit!r}), not {self.unit_column!r}")  # fmt: skip
        if bounded.key_column != self.key_column:
            raise ValueError(
                f"Keys: the rows are bounded over keys of {bounded.key_column!r}, not of {self.key_column!r}: "
                f"bound with key_column={self.key_column!r} and max_keys"
            )
        return bounded


def check_bounds(counts, *, max_rows: int | None, max_keys: int, step: str) -> None:
    """A ValueError, when the graph is built, if the bounds of the KeyCounts above ``counts`` exceed the K rows
    (None: a step that reads no row count) and L keys a unit is said to hold (the noise would not cover a unit);
    nothing where no KeyCounts marks them."""
    bounds = lineage.counted_by(counts, step)
    rows_over = max_rows is not None and bounds is not None and bounds.max_rows > max_rows
    if bounds is not None and (rows_over or (bounds.max_keys or 1) > max_keys):
        raise ValueError(
            f"{step}: the counts above are bounded to {bounds.max_rows} rows over {bounds.max_keys} keys a unit, "
            f"more than max_rows={max_rows}, max_keys={max_keys}: the noise would not cover it"
        )


def largest(table: pa.Table, n: int) -> list[tuple[int, str]]:
    """The ``n`` keys with the most rows as (rows, key), most first; ties go to the larger key (a total
    order every shard applies alike, so the global top is the same whatever the sharding)."""
    top = table.sort_by([(ROWS, "descending"), (KEY, "descending")]).slice(0, n)
    return list(zip(top.column(ROWS).to_pylist(), top.column(KEY).to_pylist(), strict=True))


MECHANISMS = ("keys-then-laplace", "keys-then-exponential", "limited-domain")  # the first finds most (bench_keys)
KEYS_FIRST = ("keys-then-laplace", "keys-then-exponential")


class PrivateTopKeys(beam.PTransform):
    """Top ``k`` keys found in the data; ``max_rows``, ``max_keys`` checked against bounding if marked, else trusted.

    Up to ``k`` keys with the most rows, best first; fewer when few keys stand out. Where the counts carry no
    bounding's mark (made by hand) it cannot tell bounds too small; ``PrivateRelease`` derives them. Three mechanisms:

    keys-then-laplace       (default) partition selection releases keys with ``keys_share`` of epsilon
                            (and all of delta); then each released key's rows get discrete Laplace noise of
                            scale K / (the rest of epsilon), and the min(k, released) largest noisy counts
                            are the answer, best first (epsilon-DP: the rows of the released keys have L1
                            sensitivity K, since a unit keeps K rows in all; only the order is released)
    keys-then-exponential   the same keys, then the exponential mechanism picks min(k, released) of them,
                            k rounds of the rest of epsilon / k (monotone, sensitivity K)
    limited-domain          the kbar (default k) largest counts and a bottom, peeled exactly
                            (mechanisms/limited_domain.py)

    Privacy: (``epsilon``, ``delta``)-DP either way, when each privacy unit keeps at most ``max_rows``
    rows over at most ``max_keys`` keys (BoundContributions with both bounds). ``seed``: tests only.
    """

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        k: int,
        max_rows: int,
        max_keys: int,
        mechanism: str = MECHANISMS[0],
        kbar: int | None = None,
        keys_share: float = 0.5,
        label: str = "top keys",
        seed: int | None = None,
    ):
        super().__init__()
        self.epsilon = parameters.positive_finite(epsilon, "epsilon")
        self.delta = parameters.probability(delta, "delta")
        self.k = parameters.count(k, "k")
        self.kbar = self.k if kbar is None else parameters.count(kbar, "kbar")
        if self.kbar < self.k:
            raise ValueError(f"kbar must be at least k ({self.k}), got {self.kbar}")
        self.max_rows = parameters.count(max_rows, "max_rows")
        self.max_keys = parameters.count(max_keys, "max_keys")
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
        self.mechanism = mechanism
        self.keys_share = parameters.probability(keys_share, "keys_share")
        self.label, self.seed = label, parameters.test_seed(seed)
        self.keys = None  # partition selection, built only where it runs (its table costs a delta-long loop)
        if mechanism in KEYS_FIRST:
            self.keys = PrivateKeys(epsilon=self.epsilon * self.keys_share, delta=self.delta, max_keys=self.max_keys,
                                    seed=self.seed)  # fmt: skip

    @property
    def cost(self) -> Release:
        """(epsilon, delta)-DP: k rounds of (epsilon / k, delta / k), or the keys' share then the rest."""
        return Release.approximate(self.epsilon, self.delta, self.label)

    def accuracy(self) -> dict:
        """Public numbers for the release's accuracy note."""
        if self.mechanism == "limited-domain":
            return {"bottom_above_next_count": margin(k=self.k, kbar=self.kbar, epsilon=self.epsilon,
                                                      delta=self.delta, max_rows=self.max_rows,
                                                      max_keys=self.max_keys)}  # fmt: skip
        rule = self.keys.rule
        note = {
            "units_for_a_key_to_be_released": {
                "with_probability_0.5": rule.units_needed(0.5),
                "with_probability_0.95": rule.units_needed(0.95),
            },
            "partition_selection": "gaussian thresholding" if rule.gaussian else "optimal rule, per key",
        }
        if self.mechanism == "keys-then-laplace":
            note["rows_noise_scale"] = self.max_rows / self.rest
        return note

    @property
    def rest(self) -> float:
        """The epsilon left after partition selection, for the second stage."""
        return self.epsilon * (1 - self.keys_share)

    def candidates(self, shard: int, table: pa.Table) -> list[tuple[int, str]]:
        """One shard's candidates as (rows, key): its kbar + 1 largest, or the keys partition selection keeps;
        for keys-then-laplace, (noisy rows, key) of the k largest noisy counts among the keys it keeps."""
        if self.mechanism not in KEYS_FIRST:
            return largest(table, self.kbar + 1)
        _, kept = self.keys.keep(shard, table)
        if self.mechanism == "keys-then-exponential":
            return largest(kept, kept.num_rows)
        noisy = discrete_laplace_mechanism(kept.column(ROWS).to_numpy(), epsilon=self.rest, sensitivity=self.max_rows,
                                           rng=stream_source(self.seed, _NOISE_STREAMS + shard))  # fmt: skip
        # Independent noise a key, so the k largest of every shard's k largest are the k largest of all.
        # Ties between noisy counts go to the larger key, as in largest.
        return heapq.nlargest(self.k, zip(noisy.tolist(), kept.column(KEY).to_pylist(), strict=True))

    def select(self, candidates: list[tuple[int, str]]) -> list[str]:
        """The draw from every shard's candidates: the last step, on one worker."""
        candidates = sorted(candidates, reverse=True)
        if self.mechanism == "keys-then-laplace":  # the noise is drawn: the k largest noisy counts, best first
            return [key for _, key in candidates[: self.k]]
        if not candidates:
            return []
        rows, source = [rows for rows, _ in candidates], stream_source(self.seed, 0)
        if self.mechanism == "keys-then-exponential":
            chosen = top_k(rows, min(self.k, len(candidates)), epsilon=self.rest, sensitivity=self.max_rows,
                           monotonic=True, rng=source)  # fmt: skip
            return [candidates[i][1] for i in chosen]
        top, rest = candidates[: self.kbar], candidates[self.kbar : self.kbar + 1]
        chosen = limited_domain_top_k(
            rows[: self.kbar], rest[0][0] if rest else 0, self.k, kbar=self.kbar, epsilon=self.epsilon,
            delta=self.delta, max_rows=self.max_rows, max_keys=self.max_keys, rng=source,
        )  # fmt: skip
        return [top[i][1] for i in chosen]

    def release(self, shards: list[tuple[int, pa.Table]]) -> list[str]:
        """The same draw as ``expand``, in one process, from (key shard, Table) pairs (audits, small jobs)."""
        return self.select([pair for shard, table in shards for pair in self.candidates(shard, table)])

    def expand(self, counts):
        check_bounds(counts, max_rows=self.max_rows, max_keys=self.max_keys, step=self.label)
        gather = {
            "keys-then-laplace": beam.combiners.Top.Of(self.k),  # the k largest noisy counts of every shard's k
            "keys-then-exponential": beam.combiners.ToList(),  # the released keys (public)
            "limited-domain": beam.combiners.Top.Of(self.kbar + 1),  # the kbar + 1 largest of every shard's
        }[self.mechanism]
        return (
            counts
            | "Candidates" >> beam.FlatMapTuple(self.candidates)  # col: (rows or noisy rows, key)
            | "Gather" >> gather  # col: [(rows, key)]
            | "Select" >> beam.Map(self.select)  # col: [key]
        )


class PrivateKeys(beam.PTransform):
    """Partition selection's keys; ``max_rows``, ``max_keys`` checked against bounding if marked, else trusted.

    The keys that partition selection releases (mechanisms/partition_selection.py), with their counts.

    col: (key shard, Table) -> col: (key shard, Table of the released keys). The keys are
    (``epsilon``, ``delta``)-DP when each unit holds at most ``max_keys`` keys; their counts are NOT
    released: only a private step may read them (e.g. the exponential mechanism over these keys).
    """

    def __init__(self, *, epsilon: float, delta: float, max_keys: int, label: str = "keys", seed: int | None = None):
        super().__init__()
        self.rule = PartitionSelection(epsilon=epsilon, delta=delta, max_keys=max_keys)
        self.label, self.seed = label, parameters.test_seed(seed)

    @property
    def cost(self) -> Release:
        return Release.approximate(self.rule.epsilon, self.rule.delta, self.label)

    def keep(self, shard: int, table: pa.Table) -> tuple[int, pa.Table]:
        """One independent draw per key; the kept keys in key order. A test seed draws in key order, so that it
        gives the same draw on any runner; OS randomness draws in the table's order (iid draws: the order
        changes nothing), sparing a sort of every key (12 s of 117 at 3 * 10^7 distinct keys)."""
        if self.seed is not None:
            table = table.sort_by(KEY)
        kept = self.rule.keep(table.column(UNITS).to_numpy(), stream_source(self.seed, shard + 1))
        return shard, table.filter(pa.array(kept)).sort_by(KEY)

    def expand(self, counts):
        check_bounds(counts, max_rows=None, max_keys=self.rule.max_keys, step=self.label)
        return counts | "Keep" >> beam.MapTuple(self.keep)
