"""Audit of ``pipelines.synthesize`` as it ships (auto, the default, on each of its paths, with a target and
without; AIM with public and private grids; MWEM; BLR):
everything but its mechanisms' draws is post-processing.

The command line runs for real, from input files through validation, bounding, Beam's counting pass and the
private bin edges to the synthetic rows, on data D and on D' = D plus one privacy unit with more rows than
K, in a file of its own (the other files' batches, hence the other units' kept rows, are the same). Each
draw of a mechanism on D is recorded; on D' its input must move by at most the sensitivity the run declares,
and it is handed D's draw. Given the same releases, everything else (which rare codes merge and how a merged
code of a numeric grid is spread back over its bins, the model, the rows drawn, the numbers inside their
bins, the manifest) reads only them and public parameters, so the two runs must write the same bytes.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_expmech.synth import aim as aim_module
from beam_expmech.synth import blr as blr_module
from beam_expmech.synth import choice as choice_module
from beam_expmech.synth import mwem as mwem_module
from beam_expmech.synth import naive_bayes as naive_bayes_module
from beam_expmech.transforms import quantiles as quantiles_module
from pipelines import synthesize

MAX_ROWS = 3
DOMAIN = {
    "age": {"lower": 0, "upper": 100, "bins": 20},  # integers: the tails' bins are rare, merged
    "hours": {"lower": 0.0, "upper": 80.0, "bins": 16},  # floats
    "sector": ["a", "b", "c", "d", "e"],  # "e" is rare
    "flag": 2,
}
PRIVATE_AGE = {"lower": 0, "upper": 100, "bins": "private", "count": 8, "share": 0.2}


def people(rng: np.random.Generator, users: np.ndarray) -> pa.Table:
    """Rows of ``users`` (each as often as it occurs) with structure: hours and the flag follow age."""
    age = np.clip(np.rint(rng.normal(42, 9, users.size)), 0, 100).astype(np.int64)
    hours = np.clip(rng.normal(20 + age / 2, 6), 0, 80)
    sector = rng.choice(list("abcde"), users.size, p=[0.4, 0.3, 0.2, 0.095, 0.005])
    return pa.table({"user": users, "age": age, "hours": hours, "sector": sector,
                     "flag": (hours > 42).astype(np.int64)})  # fmt: skip


def write_inputs(folder, *, newcomer: bool) -> None:
    """D in three files (users of 1 to 5 rows: bounding drops some), and in D' a fourth with one more user:
    K + 1 rows, in a rare code of every column (the top bins of age and hours, sector "e")."""
    folder.mkdir()
    rng = np.random.default_rng(105)
    users = np.repeat(np.arange(240), rng.integers(1, 6, 240))
    for i, part in enumerate(np.array_split(users, 3)):
        pq.write_table(people(rng, part), folder / f"part-{i}.parquet")
    if newcomer:
        new = {"user": [10_000] * (MAX_ROWS + 1), "age": [99, 98, 97, 99], "hours": [79.5, 78.0, 79.9, 77.2],
               "sector": ["e"] * (MAX_ROWS + 1), "flag": [1] * (MAX_ROWS + 1)}  # fmt: skip
        pq.write_table(pa.table(new), folder / "part-3.parquet")


class Coupling:
    """Each mechanism's draws on D, handed back on D' once its input is checked to have moved by at most
    the sensitivity the run gave it: its L1 for counts (a unit's at most K rows), the largest move for scores."""

    def __init__(self, monkeypatch) -> None:
        self.draws: list[tuple[list, np.ndarray, object]] = []  # ([kind, public parameters], input, draw)
        self.replaying, self.position = False, 0
        self.worst = {"counts": 0.0, "scores": 0.0}
        self.compressions: list = []  # AIM's merged codes, D's then D''s
        for module, name, kind in (
            (aim_module.discrete_gaussian, "discrete_gaussian_mechanism", "counts"),
            (choice_module, "discrete_laplace_mechanism", "counts"),  # auto's count, and its 1-ways
            (naive_bayes_module, "discrete_laplace_mechanism", "counts"),  # auto's target 2-ways
            (aim_module, "exponential_mechanism", "scores"),
            (mwem_module, "discrete_laplace_mechanism", "counts"),
            (mwem_module, "exponential_mechanism", "scores"),
            (blr_module, "exponential_mechanism", "scores"),
            (quantiles_module, "joint_quantiles", "counts"),  # the private edges
        ):
            monkeypatch.setattr(module, name, self.coupled(getattr(module, name), kind))
        compress = aim_module._AimRun.compress

        def compress_and_keep(run, *args):
            compress(run, *args)
            self.compressions.append(run.compression)

        monkeypatch.setattr(aim_module._AimRun, "compress", compress_and_keep)
        self.handed: list = []  # what auto's posterior medians read (noisy 1-ways, scales, size), D's then D''s
        medians = choice_module.posterior_medians

        def medians_and_keep(noisy, scales, *, rows):
            self.handed.append(({c: x.copy() for c, x in noisy.items()}, dict(scales), rows))
            return medians(noisy, scales, rows=rows)

        monkeypatch.setattr(choice_module, "posterior_medians", medians_and_keep)

    def coupled(self, mechanism, kind: str):
        def draw(data, *args, rng, **parameters):
            public = [kind, [np.asarray(a).tolist() for a in args], parameters]
            # the noise each count mechanism is told: its sensitivity, K (a unit's rows), never less
            assert kind != "counts" or parameters.get("sensitivity", MAX_ROWS) >= MAX_ROWS, parameters
            exact = np.array(data, dtype=object)  # AIM's scores are Python integers
            if not self.replaying:
                drawn = mechanism(data, *args, **parameters, rng=rng)
                self.draws.append((public, exact, drawn))
                return drawn
            recorded, before, drawn = self.draws[self.position]
            self.position += 1
            assert public == recorded, "D' called a mechanism D did not, or with other parameters: the runs diverged"
            moved = np.abs(exact - before)
            bound = MAX_ROWS if kind == "counts" else parameters["sensitivity"]
            self.worst[kind] = max(self.worst[kind], float(moved.sum() if kind == "counts" else moved.max()) / bound)
            return drawn.copy() if isinstance(drawn, np.ndarray) else drawn

        return draw


def run(folder, flags: list[str]) -> tuple[pa.Table, dict]:
    out = folder / "synthetic.parquet"
    assert synthesize.main(["--input", str(folder / "*.parquet"), "--output", str(out), *flags]) == 0
    return pq.read_table(out), json.loads((folder / "synthetic.manifest.json").read_text())


CONFIGURATIONS = {
    # name: (the domain's age entry, flags (in place of the defaults below), the columns whose top code, the newcomer's,
    # AIM merges on D)
    "aim, public grids, two workers": (
        DOMAIN["age"],
        ["--method", "aim", "--direct_running_mode=multi_threading", "--direct_num_workers=2"],
        ("age", "hours", "sector"),
    ),
    "aim, private age edges": (PRIVATE_AGE, ["--method", "aim"], ("hours", "sector")),  # age's top bin: an eighth
    "aim, public grids, epsilon 2": (DOMAIN["age"], ["--method", "aim", "--epsilon", "2"], ()),
    "aim, public grids, epsilon 3": (DOMAIN["age"], ["--method", "aim", "--epsilon", "3"], ()),
    # auto's count picks its path: about 720 rows are z = 53 at epsilon 1 (the 1-ways), AIM's at 8
    "auto: independent 1-ways, public grids, two workers": (
        DOMAIN["age"],
        ["--direct_running_mode=multi_threading", "--direct_num_workers=2"],
        (),
    ),
    "auto: aim, private age edges": (PRIVATE_AGE, ["--epsilon", "8"], ()),
    "auto with a target: naive bayes, private age edges, two workers": (
        PRIVATE_AGE,
        ["--target", "flag", "--direct_running_mode=multi_threading", "--direct_num_workers=2"],
        (),
    ),
    "mwem, private age edges": (PRIVATE_AGE, ["--method", "mwem", "--rounds", "6", "--epsilon", "30"], ()),
    "blr": (DOMAIN["age"], ["--method", "blr", "--rows", "2", "--columns", "sector,flag"], ()),
}
# AIM measures its 1-ways once, or twice to a share that grows with how noisy they would be (aim.one_way_shares):
# one_way_error 1.8 and 1.2 at epsilon 1 (the top share), 0.82 at 2 (on the ramp), 0.53 at 3 (the bottom), 0.2 for
# auto's AIM at 8 (measured once)
ONE_WAY_SHARES = {
    "aim, public grids, two workers": "top",
    "aim, private age edges": "top",
    "aim, public grids, epsilon 2": "ramp",
    "aim, public grids, epsilon 3": "bottom",
    "auto: aim, private age edges": "once",
}
AUTO_PATHS = {
    "auto: independent 1-ways, public grids, two workers": "independent",
    "auto: aim, private age edges": "aim",
    "auto with a target: naive bayes, private age edges, two workers": "naive bayes",
}


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_synthesize_as_shipped_is_post_processing_of_its_draws(audit, tmp_path, monkeypatch, configuration):
    age, more, merged = CONFIGURATIONS[configuration]
    (tmp_path / "domain.json").write_text(json.dumps(DOMAIN | {"age": age}))
    defaults = {"--domain": str(tmp_path / "domain.json"), "--epsilon": "1", "--delta": "1e-6", "--seed": "7",
                "--privacy-unit": "user", "--max-rows-per-unit": str(MAX_ROWS)}  # fmt: skip
    overridden = [flag for flag in defaults if flag in more]
    if "--method" in more and more[more.index("--method") + 1] not in ("auto", "aim"):
        overridden.append("--delta")  # mwem and blr are pure epsilon-DP: they take no --delta
    flags = [x for kv in defaults.items() if kv[0] not in overridden for x in kv] + list(more)  # a flag once
    coupling = Coupling(monkeypatch)
    shares = []  # the 1-ways' second share, once each run (D's, D''s) reads it
    share_for = aim_module.one_way_share_for
    monkeypatch.setattr(aim_module, "one_way_share_for", lambda error: shares.append(share_for(error)) or shares[-1])
    write_inputs(tmp_path / "d", newcomer=False)
    write_inputs(tmp_path / "d_prime", newcomer=True)
    table, manifest = run(tmp_path / "d", flags)
    coupling.replaying = True
    table_prime, manifest_prime = run(tmp_path / "d_prime", flags)

    assert coupling.draws and coupling.position == len(coupling.draws)  # D' drew as often as D
    subject = f"pipelines.synthesize K={MAX_ROWS}, {configuration}"
    kinds = [public[0] for public, _, _ in coupling.draws]
    expected = {"counts", "scores"}
    if "blr" in more:  # BLR measures nothing
        expected = {"scores"}
    elif AUTO_PATHS.get(configuration) in ("independent", "naive bayes"):  # they select nothing
        expected = {"counts"}
    assert set(kinds) == expected
    if configuration in AUTO_PATHS:  # the path the name says: the run is not vacuous
        assert manifest["generator"] == AUTO_PATHS[configuration]
    if configuration in ONE_WAY_SHARES:  # each branch of AIM's 1-way shares is audited
        low, high = aim_module.ONE_WAY_SHARE, aim_module.SMALL_DATA_ONE_WAY_SHARE
        regime = {(): "once", (low, low): "bottom", (high, high): "top"}.get(tuple(shares), "ramp")
        assert regime == ONE_WAY_SHARES[configuration], shares
        if regime == "ramp":
            assert len(shares) == 2 and shares[0] == shares[1] and low < shares[0] < high
        one_ways = [[c] for c in manifest["columns"]]
        times = 1 if regime == "once" else 2
        assert manifest["measured"][: times * len(one_ways)] == one_ways * times
        assert manifest["measured"][times * len(one_ways) : (times + 1) * len(one_ways)] != one_ways
    for kind, check in (("counts", "counts' L1 move / K, each draw"), ("scores", "scores' move / sensitivity")):
        if kind in kinds:
            audit.check(subject, check, cases=kinds.count(kind), worst=coupling.worst[kind], bound=1.0)
    differing = sum(not table.column(c).equals(table_prime.column(c)) for c in table.column_names)
    differing += int(table.num_rows != table_prime.num_rows) + int(manifest != manifest_prime)
    cases = len(table.column_names) + 2
    if merged:
        first, second = coupling.compressions
        for column in merged:  # not vacuous: the newcomer moves the counts inside a merged code of each
            assert np.sum(first.codes[column] == first.codes[column][-1]) > 1, column
        differing += sum(not (np.array_equal(first.codes[c], second.codes[c]) and
                              np.array_equal(first.within[c], second.within[c])) for c in first.codes)  # fmt: skip
        cases += len(first.codes)
    if AUTO_PATHS.get(configuration) == "independent":  # the medians read released values only: equal on D'
        (noisy, scales, rows), (noisy_prime, scales_prime, rows_prime) = coupling.handed
        differing += int(rows != rows_prime or scales != scales_prime or noisy.keys() != noisy_prime.keys())
        differing += sum(not np.array_equal(noisy[c], noisy_prime[c]) for c in noisy)
        cases += 1 + len(noisy)
    check = "rows, manifest, AIM's merged codes and spread, what auto's medians read: equal given D's draws"
    audit.check(subject, check, cases=cases, worst=differing, bound=0.0)
