"""Synthetic data: workload error and time of our generators beside reference ones, in one run.

    python -m benchmarks.bench_synth [--datasets nltcs,titanic,payroll,fair,...] [--epsilons 1.0,0.3]
        [--seeds 3 [--first-seed 0]] [--no-reference | --references mst,aim,pgm-mst,pgm-aim]
        [--no-ours | --ours auto,aim,...]
        [--reference-aim-rounds 8,nltcs=16]
        [--pgm-python /work/pgm-venv/bin/python --pgm-source /work/pgm-src [--pgm-aim-rounds 64,nltcs=128]
         [--margnet-source /work/margnet-src] [--pgm-minutes 30]]
    python -m benchmarks.bench_synth --write-wide DIR    (the wide table as Parquet, for pipelines.synthesize)

Tables (``--datasets``, all by default; every column a code 0 .. size - 1, numbers binned as below):
  nltcs, titanic  tests/data (source and licence in tests/data/README.md)
  payroll         generated here (135,727 rows, 6 dependent columns of 3 to 33 codes: ``payroll()``)
  wide            generated here in UCI Adult's layout (48,842 rows, 15 columns of 2 to 42 codes, 455
                  3-way marginals; each column drawn given one or two earlier ones: ``wide()``);
                  ``--write-wide DIR`` writes it as DIR/wide.parquet and DIR/domain.json for the pipeline
  fair            statsmodels.datasets.fair (Fair 1978, Redbook survey), 6,366 x 9; statsmodels states
                  "Included with permission of the author"; statsmodels itself is BSD-3
  randhie         statsmodels.datasets.randhie (RAND Health Insurance Experiment), 20,190 x 10;
                  statsmodels states "This is in the public domain"
  anes96          statsmodels.datasets.anes96 (1996 American National Election Study), 944 x 10;
                  statsmodels states "This is public domain"
  penguins        palmerpenguins (Gorman, Williams, Fraser 2014; Palmer Station LTER), 342 x 8; CC0
  breast_cancer   scikit-learn's bundled breast_cancer.csv (Wisconsin Diagnostic Breast Cancer, UCI),
                  569 x 11 (diagnosis and the ten "mean" features); UCI's licence CC BY 4.0
  diabetes        scikit-learn's bundled diabetes_data_raw.csv.gz and diabetes_target.csv.gz (Efron,
                  Hastie, Johnstone, Tibshirani 2004, "Least Angle Regression"), 442 x 11; no licence
                  stated beyond scikit-learn's BSD-3
The last six are read from files inside the installed packages' wheels (``pip install -e '.[bench]'``),
never downloaded at run time. A numeric column is binned with ``beam_expmech.grids.NumericGrid.codes``
onto a public equal-width grid [lower, upper] in ``bins`` bins (values outside are clamped into the end
bins), the bounds taken from the column's documentation or common knowledge, not from the data:
  fair           age [15, 45] 6, yrs_married [0, 25] 5, children [0, 6] 6, affairs [0, 16] 8
                 (age, years married and children are the survey's interval midpoints)
  randhie        mdvis [0, 32] 16, lncoins [0, 4.7] 5 (ln(coinsurance % + 1)), lpi [0, 8] 8,
                 fmde [0, 9] 9, disea [0, 60] 12, physlm [0, 1] 2 (a few imputed fractions)
  anes96         popul [0, 8000] 16 (thousands), age [18, 98] 8
  penguins       bill_length_mm [30, 60] 10, bill_depth_mm [13, 22] 9, flipper_length_mm [170, 235] 13,
                 body_mass_g [2500, 6500] 8 (the 2 rows without measurements dropped; a missing sex is
                 its own code)
  breast_cancer  8 bins each: radius [5, 30], texture [5, 40], perimeter [40, 190], area [100, 2600],
                 smoothness [0.05, 0.17], compactness [0, 0.35], concavity [0, 0.45], concave points
                 [0, 0.21], symmetry [0.1, 0.31], fractal dimension [0.045, 0.1] (the documented
                 Min/Max of scikit-learn's description, rounded outward)
  diabetes       age [18, 88] 7, bmi [15, 45] 6, bp [60, 140] 8, tc [100, 300] 8, ldl [40, 240] 8,
                 hdl [20, 100] 8, tch [2, 10] 8, ltg [3, 6.5] 7, glu [60, 130] 7, progression
                 [25, 350] 13 (documented 25 .. 346)
The other columns are categories, one code each (listed in the table's function).

The table gives the median over seeds (until 2026-12-04 the mean) of, for each table, epsilon and
seed: the average and max L1 error over all 3-way marginals (each normalised to a probability
vector, as pipelines.evaluate_synthetic), scored two ways for every generator alike:
  model  the marginals of the generator's fitted model (what sampled rows converge to);
  rows   the marginals of as many rows as the real table has, sampled from that model (ours, as
         pipelines.synthesize draws them: one systematic sample a parent cell, beam_expmech.synth.sampling,
         then moved towards the model's answers on the workload, beam_expmech.synth.row_fitting; the
         references: i.i.d.);
and the seconds of the fit and the rows (without the scoring; until 2026-12-04 without the rows; after
each table, a comment line gives the process's peak RSS so far) of
  auto         beam_expmech.synth.choice, pipelines.synthesize's default: 1% of epsilon counts the rows, then
               independent 1-ways (Laplace, by sqrt of the sizes) where that count's z is under SMALL_Z, else
               aim with the rest of rho; (epsilon, delta = 1e-9)-DP. A comment line gives each table's z
               (from its true size; auto reads a noisy one)
  aim          beam_expmech.synth.aim, rho-zCDP at the rho of (epsilon, delta = 1e-9)
  mwem         beam_expmech.synth.mwem, 20 rounds, pure epsilon-DP
  ref MST      OpenDP 0.16 ``opendp.extras.mbi.MST()`` (mbi 1.1.0, Private-PGM mirror descent), same rho
  ref AIM      OpenDP 0.16 ``opendp.extras.mbi.AIM(rounds=T)``, same rho; T is 16 d unless
               ``--reference-aim-rounds`` caps it (the label then reads "ref AIM T=...")
  pgm MST      Private-PGM's own mechanisms/mst.py at master (4d2b3c5), with the mbi of that tree, same rho
               (benchmarks.private_pgm: run under its own interpreter, only with ``--pgm-python`` and
               ``--pgm-source``, which also add these two to the default ``--references``)
  pgm AIM      Private-PGM's own mechanisms/aim.py, same rho, every 3-way marginal its workload, max_model_size
               80 MB; T is 16 d, Private-PGM's own default and OpenDP's, unless ``--pgm-aim-rounds`` caps it
               ("pgm AIM T=..."): the 1-ways AIM measures first take 0.9 d / T of rho (5.6% at 16 d; 84% at
               T = 16 on 15 columns), so a cap far below 16 d starves a wide table's 3-ways; and AIM halves
               its noise as it goes, so it runs far fewer rounds than T on small tables (4 to 7 of 128 on penguins)
  pgm MargNet  MargNet (Chen, Gong and Wang 2025): Private-PGM's pull request #48, mechanisms/margnet.py at b2f2b81
               with the mbi of that tree (only with ``--margnet-source``, which adds it to the default
               ``--references``), same rho, its 1-way charge fixed (benchmarks.private_pgm_runner); its model is
               a mixture of products (its network's outputs), whose marginals are read exactly
  independent  noisy 1-way marginals (discrete Laplace, epsilon / d each), pure epsilon-DP
  1,000 rows   1,000 real rows sampled (not private: for scale; left out of tables of 1,000 rows or fewer)
How OpenDP's references run: ``dp.Context.compositor(data, privacy_unit=dp.unit_of(contributions=1),
privacy_loss=dp.loss_of(rho=rho))``, one query ``.contingency_table(keys={column: range(size)},
algorithm=...)``, released once. Their model marginals are ``ContingencyTable.project``, with the null
key OpenDP adds last to every column dropped and the rest renormalised. Their rows are mbi's
``MarkovRandomField.synthetic_data(rows, method="sample")``, not ``ContingencyTable.synthesize()``,
whose default ``method="round"`` assigns values by row order within each parent group and so
correlates unrelated columns; each null cell is then replaced by a draw from its column's own
synthetic non-null values. If OpenDP's MST refuses its own budget split ("insufficient budget for
query"; it does on these tables), each share is stepped down 3 ulps below OpenDP's own split, and if
it still refuses, 24 then 48 ulps, the run retried (a line says so). Private-PGM's references are read the
same way, from the log-potentials and rows their process hands back (benchmarks.private_pgm: how their budget is
made ours exactly, and what their seconds include).
The marginals are counted with numpy here (the Beam pass is the same counts); seeds make our draws
repeatable and NOT private (OpenDP's noise is its own; mbi's sampling is seeded; Private-PGM's noise and
sampling are seeded too, numpy's global generator in its process).
"""

from __future__ import annotations

import argparse
import csv
import functools
import gzip
import importlib.util
import itertools
import json
import math
import resource
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from beam_expmech.accounting import epsilon_to_zcdp
from beam_expmech.grids import NumericGrid
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.predicates import MarginalWorkload
from beam_expmech.synth.aim import aim
from beam_expmech.synth.baselines import independent_marginals
from beam_expmech.synth.choice import SMALL_Z, SMOOTH_Z, aim_or_independent, count_and_rho
from beam_expmech.synth.graphical_model import GraphicalModel
from beam_expmech.synth.mwem import mwem
from beam_expmech.synth.naive_bayes import naive_bayes
from beam_expmech.synth.row_fitting import synthetic_rows
from benchmarks import private_pgm

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
DELTA = 1e-9


class Table(NamedTuple):
    batch: pa.RecordBatch
    domain: dict[str, int]
    ordered: frozenset[str] = frozenset()  # the columns binned from numbers here (AIM smooths their rare bins)


def payroll(rows: int = 135_727, seed: int = 0) -> tuple[pa.RecordBatch, dict[str, int]]:
    """A generated stand-in for a city payroll: the pay system decides the pay rate, the rate the
    salary's level and the overtime, the salary the regular earnings; other earnings are mostly zero.
    Dependent columns, so that which marginals a generator measures matters."""
    rng = np.random.default_rng(seed)
    system = rng.choice(3, rows, p=[0.6, 0.3, 0.1])
    hourly = rng.random(rows) < np.array([0.2, 0.7, 0.4])[system]
    rate = np.where(hourly, 1, np.where(rng.random(rows) < 0.1, 2, 0))
    level = np.clip(rng.normal(np.array([16.0, 9.0, 12.0])[rate], 4.0), 0, 32).astype(int)
    regular = np.clip(level - rng.geometric(0.5, rows) + 1, 0, 32)
    overtime = np.where(hourly, np.clip(rng.poisson(level / 4), 0, 32), np.minimum(rng.poisson(0.3, rows), 32))
    other = np.where(rng.random(rows) < 0.15, rng.integers(1, 33, rows), 0)
    columns = {
        "annual-salary": (level, 33),
        "pay-rate": (rate, 3),
        "system": (system, 3),
        "regular-earnings": (regular, 33),
        "overtime-earning": (overtime, 33),
        "other-earnings": (other, 33),
    }
    return pa.record_batch({c: v for c, (v, _) in columns.items()}), {c: size for c, (_, size) in columns.items()}


WIDE_SIZES = (10, 9, 16, 16, 7, 15, 6, 5, 2, 10, 10, 10, 42, 2, 4)  # UCI Adult's 15 columns, numbers binned


def wide(rows: int = 48_842, seed: int = 0) -> tuple[pa.RecordBatch, dict[str, int]]:
    """A generated table in UCI Adult's layout (its row count, 15 columns of its domain sizes), with
    structure: column i is drawn given one or two random earlier columns, from conditionals drawn
    from Dirichlet(0.3) (skewed, as real categories are). Not independent columns, so that which
    3-way marginals a generator measures matters."""
    rng = np.random.default_rng(seed)
    columns: list[np.ndarray] = []
    for i, size in enumerate(WIDE_SIZES):
        parents = [int(p) for p in rng.choice(i, min(i, 2), replace=False)] if i else []
        table = rng.dirichlet(np.full(size, 0.3), size=math.prod(WIDE_SIZES[p] for p in parents))
        given = np.zeros(rows, dtype=np.int64)
        for p in parents:
            given = given * WIDE_SIZES[p] + columns[p]
        cdf = table.cumsum(axis=1)[given]
        columns.append((rng.random(rows)[:, None] > cdf).sum(axis=1).clip(0, size - 1))
    names = [f"c{i}" for i in range(len(WIDE_SIZES))]
    return pa.record_batch(dict(zip(names, columns, strict=True))), dict(zip(names, WIDE_SIZES, strict=True))


# Tables shipped inside PyPI wheels (read from the installed package's files, no download at run time;
# ``importlib.util.find_spec`` locates a package without importing it). Numbers are binned onto
# public equal-width grids with NumericGrid.codes: bounds from the column's documented or commonly
# known range, never from the data (values outside are clamped into the end bins).
def _package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"this table needs the {package} package: pip install -e '.[bench]'")
    return Path(spec.submodule_search_locations[0], *parts)


def _grid(lower: float, upper: float, bins: int):
    """A public equal-width grid: float values to codes 0 .. bins - 1, in order."""
    grid = NumericGrid(lower, upper, bins)
    return bins, lambda values: grid.codes(np.asarray(values, dtype=np.float64))[0], True


def _categories(*values):
    """Codes 0 .. k - 1 in the order of ``values`` (compared as numbers when they are numbers)."""
    index = {v: i for i, v in enumerate(values)}

    def encode(raw):
        keys = [float(v) if not isinstance(values[0], str) else v for v in raw]
        return np.array([index[k] for k in keys], dtype=np.int64)

    return len(values), encode, False


def _read_csv(path: Path, delimiter: str = ",", header: bool = True):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as handle:
        rows = list(csv.reader(handle, delimiter=delimiter))
    names = [n.strip("'\"") for n in rows[0]] if header else None
    return names, rows[1:] if header else rows


def _table(raw: dict[str, list], specs: dict[str, tuple]) -> Table:
    """specs: column -> (codes, encode, ordered) from ``_grid`` or ``_categories``."""
    return Table(
        pa.record_batch({c: encode(raw[c]) for c, (_, encode, _) in specs.items()}),
        {c: size for c, (size, _, _) in specs.items()},
        frozenset(c for c, (_, _, ordered) in specs.items() if ordered),
    )


def _columns(names: list[str], rows: list[list[str]], floats: set[str]) -> dict[str, list]:
    return {n: [float(r[i]) if n in floats else r[i] for r in rows] for i, n in enumerate(names)}


def fair():
    """statsmodels' fair: Fair (1978), Redbook survey of women, 6,366 x 9 (age, years married and
    children are the survey's interval midpoints; affairs a time measure, 0 for most)."""
    names, rows = _read_csv(_package_file("statsmodels", "datasets", "fair", "fair.csv"))
    specs = {
        "rate_marriage": _categories(1, 2, 3, 4, 5),
        "age": _grid(15, 45, 6),
        "yrs_married": _grid(0, 25, 5),
        "children": _grid(0, 6, 6),
        "religious": _categories(1, 2, 3, 4),
        "educ": _categories(9, 12, 14, 16, 17, 20),
        "occupation": _categories(1, 2, 3, 4, 5, 6),
        "occupation_husb": _categories(1, 2, 3, 4, 5, 6),
        "affairs": _grid(0, 16, 8),
    }
    return _table(_columns(names, rows, set(names)), specs)


def randhie():
    """statsmodels' randhie: the RAND Health Insurance Experiment, 20,190 x 10."""
    names, rows = _read_csv(_package_file("statsmodels", "datasets", "randhie", "randhie.csv"))
    binary = _categories(0, 1)
    specs = {
        "mdvis": _grid(0, 32, 16),  # outpatient visits to an MD in the year
        "lncoins": _grid(0, 4.7, 5),  # ln(coinsurance + 1), coinsurance 0..100 %
        "idp": binary,
        "lpi": _grid(0, 8, 8),  # ln(max(1, participation incentive in $))
        "fmde": _grid(0, 9, 9),  # ln(max(1, maximum dollar expenditure / coinsurance))
        "physlm": _grid(0, 1, 2),  # physical limitation (a few imputed fractions: the nearer)
        "disea": _grid(0, 60, 12),  # chronic diseases (the study's index)
        "hlthg": binary,
        "hlthf": binary,
        "hlthp": binary,
    }
    return _table(_columns(names, rows, set(names)), specs)


def anes96():
    """statsmodels' anes96: the 1996 American National Election Study, 944 x 10."""
    names, rows = _read_csv(_package_file("statsmodels", "datasets", "anes96", "anes96.csv"), delimiter="\t")
    scale = _categories(1, 2, 3, 4, 5, 6, 7)
    specs = {
        "popul": _grid(0, 8000, 16),  # census place population in 1000s (New York City: about 7,300)
        "TVnews": _categories(0, 1, 2, 3, 4, 5, 6, 7),  # days a week
        "selfLR": scale,
        "ClinLR": scale,
        "DoleLR": scale,
        "PID": _categories(0, 1, 2, 3, 4, 5, 6),
        "age": _grid(18, 98, 8),
        "educ": scale,
        "income": _categories(*range(1, 25)),
        "vote": _categories(0, 1),
    }
    return _table(_columns(names, rows, set(names)), specs)


def penguins():
    """palmerpenguins: Palmer Station penguins (Gorman, Williams, Fraser 2014), 344 x 8; the 2 rows with
    no measurements are dropped (342 rows), a missing sex is a code of its own."""
    names, rows = _read_csv(_package_file("palmerpenguins", "data", "penguins.csv"))
    rows = [r for r in rows if r[names.index("body_mass_g")] != "NA"]
    specs = {
        "species": _categories("Adelie", "Chinstrap", "Gentoo"),
        "island": _categories("Biscoe", "Dream", "Torgersen"),
        "bill_length_mm": _grid(30, 60, 10),
        "bill_depth_mm": _grid(13, 22, 9),
        "flipper_length_mm": _grid(170, 235, 13),
        "body_mass_g": _grid(2500, 6500, 8),
        "sex": _categories("female", "male", "NA"),
        "year": _categories("2007", "2008", "2009"),
    }
    numbers = {"bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"}
    return _table(_columns(names, rows, numbers), specs)


def breast_cancer():
    """scikit-learn's bundled breast cancer (Wisconsin diagnostic), 569 x 11: the diagnosis and the
    ten "mean" features; bounds rounded outward from the Min/Max of the dataset's documentation."""
    _, rows = _read_csv(_package_file("sklearn", "datasets", "data", "breast_cancer.csv"))
    features = {
        "radius": (5, 30),
        "texture": (5, 40),
        "perimeter": (40, 190),
        "area": (100, 2600),
        "smoothness": (0.05, 0.17),
        "compactness": (0, 0.35),
        "concavity": (0, 0.45),
        "concave_points": (0, 0.21),
        "symmetry": (0.1, 0.31),
        "fractal_dimension": (0.045, 0.1),
    }
    raw = {c: [float(r[i]) for r in rows] for i, c in enumerate(features)}
    raw["diagnosis"] = [float(r[-1]) for r in rows]  # 0 malignant, 1 benign
    specs = {"diagnosis": _categories(0, 1)} | {c: _grid(lo, hi, 8) for c, (lo, hi) in features.items()}
    return _table(raw, specs)


def diabetes():
    """scikit-learn's bundled diabetes, raw (Efron, Hastie, Johnstone, Tibshirani 2004), 442 x 11: the
    ten baseline measurements and the disease progression a year later (documented range 25 .. 346)."""
    _, rows = _read_csv(_package_file("sklearn", "datasets", "data", "diabetes_data_raw.csv.gz"), " ", False)
    _, target = _read_csv(_package_file("sklearn", "datasets", "data", "diabetes_target.csv.gz"), " ", False)
    bounds = {
        "age": (18, 88, 7),  # years, adults
        "sex": None,
        "bmi": (15, 45, 6),  # kg/m^2
        "bp": (60, 140, 8),  # mean arterial pressure, mm Hg
        "tc": (100, 300, 8),  # total cholesterol, mg/dL (S1)
        "ldl": (40, 240, 8),  # (S2)
        "hdl": (20, 100, 8),  # (S3)
        "tch": (2, 10, 8),  # total / HDL cholesterol (S4)
        "ltg": (3, 6.5, 7),  # log of serum triglycerides (S5)
        "glu": (60, 130, 7),  # blood sugar, mg/dL (S6)
    }
    raw = {c: [float(r[i]) for r in rows] for i, c in enumerate(bounds)}
    raw["progression"] = [float(r[0]) for r in target]
    specs = {c: _categories(1, 2) if b is None else _grid(*b) for c, b in bounds.items()}
    return _table(raw, specs | {"progression": _grid(25, 350, 13)})


WHEEL_TABLES = {
    "fair": fair,
    "randhie": randhie,
    "anes96": anes96,
    "penguins": penguins,
    "breast_cancer": breast_cancer,
    "diabetes": diabetes,
}
DATASETS = ["nltcs", "titanic", "payroll", "wide", *WHEEL_TABLES]
OURS = ["auto", "aim", "mwem", "independent", "1,000 rows"]


def load(name: str) -> Table:
    if name == "payroll":
        return Table(*payroll())
    if name == "wide":
        return Table(*wide())
    if name in WHEEL_TABLES:
        return WHEEL_TABLES[name]()
    domain = json.loads((DATA / name / "domain.json").read_text())
    with open(DATA / name / f"{name}.csv") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        rows = np.array([[int(v) for v in row] for row in reader])
    return Table(pa.record_batch({c: rows[:, header.index(c)] for c in domain}), domain)


def counts(batch: pa.RecordBatch, domain: dict[str, int], degree: int) -> dict:
    workload = MarginalWorkload(list(itertools.combinations(domain, degree)), domain)
    return workload.split(workload.count(batch))


def errors(true: dict, marginal_of) -> tuple[float, float]:
    values = [float(np.abs(c / c.sum() - marginal_of(m)).sum()) for m, c in true.items()]
    return float(np.mean(values)), float(np.max(values))


@dataclass
class Fitted:
    """A generator's output, scored two ways: its model's marginals, and ``rows`` rows sampled from it."""

    marginal: Callable[[tuple[str, ...]], np.ndarray]  # normalised to a probability vector
    sample: Callable[[int, int], dict[str, np.ndarray]]  # (rows, seed) -> {column: codes}


def _ours(model, domain: dict[str, int], workload: list[tuple[str, ...]]) -> Fitted:
    """Our generator's model, and its rows as pipelines.synthesize draws them (``synthetic_rows``)."""
    return Fitted(
        model.marginal,
        lambda rows, seed: synthetic_rows(model, domain, workload, rows, source=random_source(seed + 1_000_003)),
    )


def sampled_rows(batch: pa.RecordBatch, domain: dict[str, int], seed: int) -> Fitted:
    """1,000 real rows drawn without replacement (its model and its rows are the same)."""
    rows = batch.take(pa.array(np.random.default_rng(seed).choice(batch.num_rows, 1000, replace=False)))
    sample = counts(rows, domain, 3)
    return Fitted(lambda m: sample[m] / sample[m].sum(), lambda n, s: {c: rows.column(c).to_numpy() for c in domain})


def row_errors(true: dict, domain: dict[str, int], rows: dict[str, np.ndarray]) -> tuple[float, float]:
    synthetic = counts(pa.record_batch(rows), domain, 3)
    return errors(true, lambda m: synthetic[m] / synthetic[m].sum())


_MST_ULPS = [3, 24, 48]  # extra ulps each of OpenDP MST's budget shares is stepped down by, tried in turn


def reference(batch: pa.RecordBatch, domain: dict[str, int], rho: float, method: str, rounds: int | None) -> Fitted:
    """OpenDP's MST or AIM at ``rho``-zCDP, one row per person, every column's keys given (0 .. size - 1).

    Model marginals: the fitted MarkovRandomField's (``ContingencyTable.project``), the null key OpenDP
    adds last to every column dropped and the rest renormalised. Rows: mbi's
    ``synthetic_data(rows, method="sample")`` (i.i.d. draws down the junction tree; its default "round",
    which OpenDP's ``synthesize()`` uses, assigns values by row order within each parent group and
    correlates unrelated columns), each null cell replaced by a draw from its column's own synthetic
    non-null values.
    """
    import opendp.extras.mbi._mst as opendp_mst
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    prior = getattr(opendp_mst, "_prior", opendp_mst.prior)
    opendp_mst._prior = prior
    frame = pl.LazyFrame({c: batch.column(c).to_numpy() for c in domain})
    keys = {c: list(range(size)) for c, size in domain.items()}
    for ulps in _MST_ULPS if method == "mst" else [0]:  # a retry runs MST anew (fresh noise)
        # OpenDP 0.16's MST splits its budget and can then refuse a share by an ulp ("insufficient
        # budget for query"): each of its shares is stepped ``ulps`` further down and the run retried.
        opendp_mst.prior = functools.partial(_stepped_down, prior, ulps)
        context = dp.Context.compositor(
            data=frame, privacy_unit=dp.unit_of(contributions=1), privacy_loss=dp.loss_of(rho=rho), split_evenly_over=1
        )
        algorithm = dp.mbi.MST() if method == "mst" else dp.mbi.AIM(rounds=rounds)
        try:
            table = context.query().contingency_table(keys=keys, algorithm=algorithm).release()
            break
        except Exception as error:  # OpenDPException
            if "insufficient budget" not in str(error) or ulps == _MST_ULPS[-1]:
                raise
            print(f"# ref MST refused its budget split with shares {ulps} ulps down; trying more", flush=True)
    model = table.model
    potentials = model.potentials
    ours = log_potential_model(
        potentials.domain.config, [(f.domain.attributes, f.values) for f in potentials.arrays.values()]
    )

    def marginal(columns):
        values = ours.project(columns)[tuple(slice(0, -1) for _ in columns)]  # OpenDP adds a null key last
        return values / values.sum()

    def sample(rows: int, seed: int) -> dict[str, np.ndarray]:
        np.random.seed(seed)  # mbi draws from numpy's global generator
        data = model.synthetic_data(rows, method="sample").to_dict()
        out = {}
        for c, size in domain.items():
            codes = np.asarray(data[c], dtype=np.int64)
            null = codes >= size  # the null key, index size
            if null.any():
                present = codes[~null]
                codes[null] = np.random.choice(present, int(null.sum())) if present.size else 0
            out[c] = codes
        return out

    return Fitted(marginal, sample)


def log_potential_model(sizes: dict[str, int], factors: Iterable[tuple[Sequence[str], np.ndarray]]) -> GraphicalModel:
    """An mbi model (OpenDP's or Private-PGM's) as ours, from its log-potentials ((columns, values) a factor):
    the same marginals to float rounding, where mbi's own projection runs variable elimination in JAX per
    marginal (minutes a table of 455 3-way marginals)."""
    return GraphicalModel.of_log_potentials(
        sizes, [(tuple(columns), np.asarray(values, dtype=np.float64)) for columns, values in factors]
    )


def pgm_reference(
    pgm: private_pgm.PrivatePgm,
    batch: pa.RecordBatch,
    domain: dict[str, int],
    method: str,
    *,
    epsilon: float,
    rho: float,
    seed: int,
    rounds: int | None,
    label: str,
) -> Fitted:
    """Private-PGM's own MST or AIM (``benchmarks.private_pgm``) at exactly ``rho``, in its own process. Model
    marginals: from its log-potentials, as OpenDP's. Rows: drawn in that process with the fit (mbi's
    ``synthetic_data(rows, method="sample")``, as many as the table has, from numpy's generator seeded with
    ``seed``); ``sample`` hands them back, for that count only."""
    fit = pgm.run(
        method,
        {c: batch.column(c).to_numpy() for c in domain},
        domain,
        epsilon=epsilon,
        delta=DELTA,
        rho=rho,
        seed=seed,
        rounds=rounds,
    )
    private_pgm.report(label, fit)
    if fit.mixture is not None:  # MargNet
        marginal = functools.partial(fit.marginal, domain)
    else:
        marginal = log_potential_model(domain, fit.factors).marginal

    def sample(rows: int, _seed: int) -> dict[str, np.ndarray]:
        if rows != batch.num_rows:
            raise ValueError(f"{label} drew {batch.num_rows} rows with its fit, not {rows}")
        return fit.rows

    return Fitted(marginal, sample)


def _stepped_down(prior, ulps: int, value: float) -> float:
    value = prior(value)
    for _ in range(ulps):
        value = prior(value)
    return value


def forced_naive_bayes(true, domain, epsilon, target, seed):
    """Naive Bayes with auto's share of epsilon and its smoothing, but not its choice: z and the size from the true
    count (a benchmark's shortcut, NOT private)."""
    count_epsilon, rho = count_and_rho(epsilon, DELTA)
    rows = int(next(iter(true.values())).sum())
    z = rows * math.sqrt(2 * rho)
    return naive_bayes(true, domain, target=target, epsilon=epsilon - count_epsilon, max_rows=1,
                       count=(rows, count_epsilon), smoothing=max(0.0, 1 - z / SMOOTH_Z),
                       source=random_source(seed)).model  # fmt: skip


def generator_arguments(parser: argparse.ArgumentParser, datasets: list[str], ours: list[str]) -> None:
    """The flags that choose the tables, epsilons, seeds and generators (``generators``), here and in bench_tstr."""
    parser.add_argument("--datasets", default=",".join(datasets))
    parser.add_argument("--epsilons", default="1.0,0.3")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed run (a run split in parts)")
    parser.add_argument("--no-reference", action="store_true", help="skip the references (OpenDP's, Private-PGM's)")
    parser.add_argument(
        "--references",
        help="which of OpenDP's MST and AIM (mst, aim) and Private-PGM's (pgm-mst, pgm-aim, pgm-margnet) to run; "
        "default mst,aim and, with --pgm-python and --pgm-source, pgm-mst,pgm-aim (and pgm-margnet with "
        "--margnet-source)",
    )
    parser.add_argument("--no-ours", action="store_true", help="run the references only (a run split in parts)")
    parser.add_argument("--ours", default=",".join(ours), help="which of ours and the baselines to run")
    parser.add_argument(
        "--reference-aim-rounds",
        default="",
        help="OpenDP AIM's T: a number for every dataset and/or NAME=T for one (default 16 d)",
    )
    private_pgm.add_arguments(parser)


def parse_generator_arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """``parser.parse_args()``, then the references settled: ``references`` the set to run, ``pgm`` Private-PGM
    (None without its flags: its references are then dropped, and a line says so)."""
    args = parser.parse_args()
    if args.seeds < 1 or args.first_seed < 0:
        parser.error("--seeds must be at least 1 and --first-seed at least 0")
    args.pgm = private_pgm.configured(parser, args)
    default = "mst,aim" if args.pgm is None else "mst,aim,pgm-mst,pgm-aim"
    default += ",pgm-margnet" if args.pgm is not None and args.pgm.margnet_source is not None else ""
    references = set() if args.no_reference else set((args.references or default).split(","))
    if unknown := references - {"mst", "aim", *private_pgm.METHODS}:
        parser.error(f"--references: unknown {', '.join(sorted(unknown))}")
    if args.pgm is None and not args.no_reference:
        print("# Private-PGM's references skipped: no --pgm-python and --pgm-source", flush=True)
        references -= set(private_pgm.METHODS)
    if "pgm-margnet" in references and args.pgm.margnet_source is None:
        parser.error("--references pgm-margnet needs --margnet-source")
    args.references = references
    return args


def aim_rounds(flag: str) -> Callable[[str], int | None]:
    """A table's AIM rounds from a flag's value (--reference-aim-rounds, --pgm-aim-rounds): a number for every
    table and/or NAME=T for one (None: the mechanism's default)."""
    items = [item for item in flag.split(",") if item]
    by_table = {k: int(v) for k, v in (item.split("=") for item in items if "=" in item)}
    default = next((int(item) for item in items if "=" not in item), None)
    return lambda name: by_table.get(name, default)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    generator_arguments(parser, DATASETS, OURS)
    parser.add_argument("--write-wide", metavar="DIR", help="write the wide table for pipelines.synthesize and stop")
    args = parse_generator_arguments(parser)
    if args.write_wide:
        write_wide(Path(args.write_wide))
        return
    rounds_of, pgm_rounds_of = aim_rounds(args.reference_aim_rounds), aim_rounds(args.pgm_aim_rounds)
    print(
        f"{'dataset':<13} {'epsilon':>7} {'method':<16} {'model avg':>9} {'model max':>9} "
        f"{'rows avg':>9} {'rows max':>9} {'seconds':>8}",
        flush=True,
    )
    for name in args.datasets.split(","):
        batch, domain, ordered = load(name)
        true = counts(batch, domain, 3)
        one_way = {m[0]: c for m, c in counts(batch, domain, 1).items()}
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            rho = epsilon_to_zcdp(epsilon, delta=DELTA)
            z = batch.num_rows * math.sqrt(2 * rho)  # what auto's rule reads, from a noisy count (synth.choice)
            print(f"# {name} {epsilon:g}: {batch.num_rows:,} rows, z = {z:.1f} (auto: independent under {SMALL_Z})",
                  flush=True)  # fmt: skip
            rows: dict[str, list] = {}
            failed: dict[str, int] = {}
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for method, fit in generators(
                    batch, domain, ordered, true, one_way, epsilon, rho, seed, args, rounds_of(name),
                    pgm_aim_rounds=pgm_rounds_of(name),
                ):  # fmt: skip
                    start = time.perf_counter()
                    run = f"{name} {epsilon:g} {method} seed {seed}"
                    if (fitted := fit_or_report(fit, method, run, failed)) is None:
                        continue
                    sampled = fitted.sample(batch.num_rows, seed)
                    seconds = time.perf_counter() - start
                    scores = (*errors(true, fitted.marginal), *row_errors(true, domain, sampled))
                    rows.setdefault(method, []).append((*scores, seconds))
                    print(f"# {name} {epsilon:g} {method} seed {seed}: {scores[0]:.4f} {scores[2]:.4f} {seconds:.1f} s",
                          file=sys.stderr, flush=True)  # fmt: skip
            for method, runs in rows.items():
                medians = np.median(runs, axis=0)  # the floor of issue 16 is on medians of seeds
                scores = " ".join(f"{v:>9.4f}" for v in medians[:4])
                seconds = medians[4]
                print(f"{name:<13} {epsilon:>7g} {method:<16} {scores} {seconds:>8.1f}{failures(failed, method)}",
                      flush=True)  # fmt: skip
            for method in failed.keys() - rows.keys():
                print(f"{name:<13} {epsilon:>7g} {method:<16} not finished in every seed", flush=True)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        print(f"# {name}: peak RSS of this process so far {peak:,.0f} MiB", flush=True)


def fit_or_report(fit: Callable[[], Fitted], method: str, run: str, failed: dict[str, int]) -> Fitted | None:
    """``fit()``; None where Private-PGM's process failed or was stopped at its cap (``private_pgm.PgmFailed``): a
    line names the ``run`` and its reason, and ``failed`` counts it under ``method``."""
    try:
        return fit()
    except private_pgm.PgmFailed as failure:
        failed[method] = failed.get(method, 0) + 1
        print(f"# {run}: {failure.reason}; left out of the medians", flush=True)
        return None


def failures(failed: dict[str, int], method: str) -> str:
    """What a median line adds when some of its seeds did not finish (``fit_or_report``)."""
    return f"  ({failed[method]} seed{'s' * (failed[method] > 1)} not finished, left out)" if method in failed else ""


def write_wide(directory: Path) -> None:
    """The wide table as DIR/wide.parquet and its DIR/domain.json (codes), for ``pipelines.synthesize``."""
    import pyarrow.parquet as pq

    batch, domain = wide()
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_batches([batch]), directory / "wide.parquet")
    (directory / "domain.json").write_text(json.dumps(domain))
    print(f"wrote {batch.num_rows:,} rows to {directory / 'wide.parquet'} and {directory / 'domain.json'}")


def generators(batch, domain, ordered, true, one_way, epsilon, rho, seed, args, ref_aim_rounds, target=None,
               pgm_aim_rounds=None):  # fmt: skip
    """(method, fit) pairs: each fit runs one generator and returns it as a Fitted. ``args``: as
    ``parse_generator_arguments`` leaves them. ``target``: the column a model will predict (bench_tstr), which
    auto is told and naive Bayes needs."""
    references = args.references
    ours = set() if args.no_ours else set(args.ours.split(","))
    if "auto" in ours:
        yield (
            "auto",
            lambda: _ours(
                aim_or_independent(
                    true, domain, epsilon=epsilon, delta=DELTA, ordered=ordered, target=target, rng=seed
                ).model,
                domain,
                list(true),
            ),
        )
    if "naive bayes" in ours and target is not None:  # whatever z is: for tuning auto's threshold
        yield "naive bayes", lambda: _ours(forced_naive_bayes(true, domain, epsilon, target, seed), domain, list(true))
    if "aim" in ours:
        yield "aim", lambda: _ours(aim(true, domain, rho=rho, ordered=ordered, rng=seed).model, domain, list(true))
    if "mwem" in ours:
        yield "mwem", lambda: _ours(mwem(true, domain, epsilon=epsilon, rounds=20, rng=seed).model, domain, list(true))
    if "mst" in references:
        yield "ref MST", lambda: reference(batch, domain, rho, "mst", None)
    if "aim" in references:
        label = "ref AIM" if ref_aim_rounds is None else f"ref AIM T={ref_aim_rounds}"
        yield label, lambda: reference(batch, domain, rho, "aim", ref_aim_rounds)
    for name, method in private_pgm.METHODS.items():
        if name in references:
            rounds = pgm_aim_rounds if method == "aim" else None
            label = f"pgm {private_pgm.LABELS[method]}" + ("" if rounds is None else f" T={rounds}")
            yield label, functools.partial(pgm_reference, args.pgm, batch, domain, method, epsilon=epsilon, rho=rho,
                                           seed=seed, rounds=rounds, label=label)  # fmt: skip
    if "independent" in ours:
        yield "independent", lambda: _ours(independent_marginals(one_way, epsilon=epsilon, rng=seed)[0], domain,
                                           list(true))  # fmt: skip
    if "1,000 rows" in ours and batch.num_rows > 1000:  # else it would be the table itself
        yield "1,000 rows", lambda: sampled_rows(batch, domain, seed)


if __name__ == "__main__":
    main()
