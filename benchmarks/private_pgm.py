"""Private-PGM's own MST and AIM (and MargNet) as benchmark references, run in a process and interpreter of their own.

    python -m benchmarks.bench_synth --references pgm-mst,pgm-aim \\
        --pgm-python /work/pgm-venv/bin/python --pgm-source /work/pgm-src [--pgm-aim-rounds 64,nltcs=128] \\
        [--pgm-minutes 30]

Private-PGM (McKenna, Sheldon, Miklau; github.com/ryan112358/private-pgm) at master (4d2b3c5 was measured): its
``mechanisms/mst.py`` and ``mechanisms/aim.py`` with the ``mbi`` of the same tree (``src/mbi``), not PyPI's
mbi 2.0.0, a later rewrite. That tree needs jax 0.7 and pandas below 3, which our bench's environment does not
have, so it runs under its own interpreter, ``--pgm-python``, in a venv of its own, e.g.

    python3.11 -m venv /work/pgm-venv
    /work/pgm-venv/bin/pip install 'jax==0.7.0' 'jaxlib==0.7.0' 'pandas<3' numpy scipy networkx attrs chex \\
        optax matplotlib                                  (mechanisms/cdp2adp.py imports matplotlib)

and ``--pgm-source`` is an export of that tree (nothing is installed from it, nothing is downloaded at run time:
``private_pgm_runner.py`` puts its ``src`` and ``mechanisms`` first on its own sys.path). Without both flags
the Private-PGM references are skipped, and a line says so.

One run is one process (``private_pgm_runner.py``, launched with ``--pgm-python``): the table's codes and
domain go in as an npz file, and out come the fitted model's log-potentials (each factor on the original
codes; the bench reads its 3-way marginals from them, as it reads OpenDP's) and as many rows as the table
has, drawn in that process from the model (mbi's ``synthetic_data(rows, method="sample")``, i.i.d., as for
OpenDP's references). The seconds the bench reports include the process's start (about 4 s: Python, JAX and
mbi imported, the files written and read); the runner's own fit and sample seconds go to stderr.

The budget is ours exactly: the bench's rho (zCDP, from (epsilon, delta = 1e-9) by
``beam_expmech.accounting.epsilon_to_zcdp``). Private-PGM converts (epsilon, delta) to rho itself with
``cdp2adp.cdp_rho``, a tighter conversion than ours (at epsilon 1 its rho is 0.0149731, ours 0.0149724), so
AIM is constructed with (epsilon, delta) and its ``rho`` attribute then set to ours, and MST, a function that
converts inside, runs with its module's ``cdp_rho`` replaced by one returning ours.

AIM's settings: its workload every 3-way marginal, weight 1 (what the bench scores, and OpenDP's AIM's
default), ``max_model_size`` 80 MB and ``max_iters`` 1000 (Private-PGM's and OpenDP's defaults; aim.py asks
that 80 be kept "for any official comparisons"). Its rounds T: Private-PGM's own default, 16 d (d the
columns), the same as the OpenDP reference's, unless ``--pgm-aim-rounds`` caps it (a number for every table
and/or NAME=T for one; the label then reads "pgm AIM T=..."). T sets how AIM splits rho: the d 1-way
marginals it measures first take 0.9 d / T of it, 5.6% at T = 16 d on any table but 84% at T = 16 on 15
columns, which would leave a wide table's 3-way structure almost nothing; so a cap should stay near 16 d,
and never below 4 d (22.5%). AIM then measures until its budget is spent, halving its noise whenever a
round barely moves the model, so the rounds it runs are far fewer than T on small tables (penguins, 342
rows, epsilon 1: 4 to 7 of 128; fair, 6,366 rows: 14 of 144) and the time grows with the rows: each round
refits the model (1,000 mirror descent steps, JAX recompiling for each new set of cliques), about 6 s on
penguins and 12 s on fair (2 busy cores). So no cap by default: on the small tables AIM's own budget ends it
within a few minutes, and a cap would only move rho to the 1-ways; ``--pgm-aim-rounds`` is for long runs.

MargNet (Chen, Gong and Wang 2025; ``--references pgm-margnet``, with ``--margnet-source``): Private-PGM's pull
request #48, ``mechanisms/margnet.py`` at b2f2b81, with the ``mbi`` of that tree (its ``MargNN``, a network in
flax), exported as the master tree is; it runs with ``--pgm-python``, whose venv then needs flax too
(``pip install flax 'jax==0.7.0' 'jaxlib==0.7.0'``: flax 0.11.2 was measured). It measures the 1-ways, then picks
2-way marginals by the exponential mechanism until its rho is spent, retraining the network (300 Adam steps)
after each. Its 1-way charge is fixed as it runs (``private_pgm_runner.MARGNET_FIXES``): unfixed, each 1-way is
charged d times: on 15 columns its accounting would count 84% of rho as spent on 1-ways that spend 5.6%, and
78% of rho would never be spent, which would measure MargNet's bug, not its method. Its network is seeded with
the bench's seed as well (theirs is 0 in every run). Its model is a mixture of product distributions,
one for each of its network's 512 fixed inputs; ``PgmFit.marginal`` reads their marginals exactly.

Seeds: the runner seeds numpy's global generator with the bench's seed (their noise, exponential
mechanism and sampling all draw from it), and runs with PYTHONHASHSEED=0, since AIM lists its candidate
marginals out of a set of tuples of str, whose order (and so which marginal a draw picks, and which noise
goes to which 1-way) otherwise changes with each process's hash seed: the same seed then gives the same
rows. Repeatable, and NOT private, as for OpenDP's references.

A time cap, ``--pgm-minutes M``: a run still going after M minutes is stopped, and the bench's line says how far
it got (AIM: its rounds after the 1-ways and the share of rho spent; MargNet: its rounds), read from what the
mechanism had printed (the runner passes it on as it prints). Such a run is left out of the medians. No cap by
default: on nltcs and wide Private-PGM's AIM runs for hours a seed (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RUNNER = Path(__file__).with_name("private_pgm_runner.py")
METHODS = {"pgm-mst": "mst", "pgm-aim": "aim", "pgm-margnet": "margnet"}  # --references names -> the runner's --method
LABELS = {"mst": "MST", "aim": "AIM", "margnet": "MargNet"}  # the runner's --method -> the benches' labels
MAX_MODEL_SIZE = 80.0  # MB, AIM's max_model_size: Private-PGM's and OpenDP's default


class PgmFailed(RuntimeError):
    """Private-PGM's process exited with an error (as its AIM's "probabilities contain NaN" at titanic 0.1) or
    was stopped at the time cap: the benches report the run as a line and leave it out of the medians.
    ``reason``: its last line of stderr, or how far it got before the cap (``progress``)."""

    def __init__(self, method: str, reason: str, stderr: str):
        self.reason = reason
        tail = "\n".join(stderr.strip().splitlines()[-30:])
        super().__init__(f"Private-PGM's {method}: {reason}\n{tail}")


def progress(method: str, printed: str) -> str:
    """How far a run got, from what its mechanism printed (the runner passes it on as it prints): AIM's rounds
    and the share of rho it had spent, MargNet's rounds."""
    if method == "aim":
        spent = [line.split() for line in printed.splitlines() if line.startswith("Budget Used")]
        share = f", {float(spent[-1][2]) / float(spent[-1][4]):.0%} of rho spent" if spent else ""
        return f"{printed.count('Measuring Clique')} rounds after its 1-ways{share}"
    if method == "margnet":
        return f"{printed.count('selected marginal:')} rounds"
    return "no rounds to count"


@dataclass(frozen=True)
class PgmFit:
    """What one run of Private-PGM's MST or AIM gives back."""

    factors: list[tuple[tuple[str, ...], np.ndarray]]  # the model's log-potentials, on the original codes
    rows: dict[str, np.ndarray]  # rows drawn from the model, as many as asked for: {column: codes}
    info: dict  # the runner's seconds, the model's cliques, AIM's rounds
    mixture: np.ndarray | None = None  # MargNet's model instead of factors: product distributions, one a row

    def marginal(self, domain: dict[str, int], columns: tuple[str, ...]) -> np.ndarray:
        """The mixture's marginal on ``columns`` (MargNet's), normalised, an axis a column."""
        starts = dict(zip(domain, np.cumsum([0, *domain.values()])[:-1], strict=True))
        parts = [self.mixture[:, starts[c] : starts[c] + domain[c]] for c in columns]
        axes = "".join(chr(ord("b") + i) for i in range(len(parts)))
        joint = np.einsum(",".join(f"a{x}" for x in axes) + f"->{axes}", *parts) / len(self.mixture)
        return joint / joint.sum()


@dataclass(frozen=True)
class PrivatePgm:
    """Private-PGM's interpreter and source tree (the flags ``--pgm-python`` and ``--pgm-source``)."""

    python: Path
    source: Path
    margnet_source: Path | None = None  # pull request #48's tree (b2f2b81), for MargNet
    minutes: float | None = None  # a run's time cap (--pgm-minutes); None: no cap

    def run(
        self,
        method: str,
        columns: dict[str, np.ndarray],
        domain: dict[str, int],
        *,
        epsilon: float,
        delta: float,
        rho: float,
        seed: int,
        rounds: int | None = None,
    ) -> PgmFit:
        """Private-PGM's ``method`` ("mst", "aim" or "margnet") on the table ``columns`` (codes 0 .. size - 1 of
        ``domain``) at exactly ``rho``-zCDP, and as many rows as the table has, drawn from its model; ``rounds``:
        AIM's T (None: its default, 16 d)."""
        rows = len(next(iter(columns.values())))
        with tempfile.TemporaryDirectory(prefix="private-pgm-") as folder:
            given, answer = Path(folder, "in.npz"), Path(folder, "out.npz")
            np.savez(
                given,
                codes=np.column_stack([np.asarray(columns[c], dtype=np.int64) for c in domain]),
                names=np.array(list(domain)),
                sizes=np.array(list(domain.values()), dtype=np.int64),
            )
            source = self.margnet_source if method == "margnet" else self.source
            command = [str(self.python), str(RUNNER), "--source", str(source), "--method", method]
            floats = {"epsilon": epsilon, "delta": delta, "rho": rho, "max-model-size": MAX_MODEL_SIZE}
            for flag, value in floats.items():
                command += [f"--{flag}", repr(float(value))]  # a float's repr reads back as the same float
            command += ["--seed", str(int(seed)), "--rows", str(rows)]
            if rounds is not None:
                command += ["--rounds", str(rounds)]
            command += [str(given), str(answer)]
            environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # its own packages only
            environment["PYTHONHASHSEED"] = "0"  # AIM's candidates come out of sets of str: their order, repeatable
            cap = None if self.minutes is None else 60 * self.minutes
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, env=environment, check=False, timeout=cap
                )
            except subprocess.TimeoutExpired as stopped:  # the process is killed; its stderr so far (bytes) kept
                printed = stopped.stderr or b""
                printed = printed.decode(errors="replace") if isinstance(printed, bytes) else printed
                reason = f"stopped at {self.minutes:g} min, {progress(method, printed)}"
                raise PgmFailed(method, reason, printed) from None
            if done.returncode:
                lines = done.stderr.strip().splitlines() or ["(no output)"]
                raise PgmFailed(method, f"exited with {done.returncode}: {lines[-1]}", done.stderr)
            with np.load(answer) as stored:
                names = json.loads(str(stored["cliques"]))
                factors = [(tuple(c), stored[f"factor_{i}"]) for i, c in enumerate(names)]
                codes = stored["rows"]
                info = json.loads(str(stored["info"]))
                mixture = stored.get("mixture")
        return PgmFit(factors, {c: codes[:, i] for i, c in enumerate(domain)}, info, mixture)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that locate Private-PGM, and AIM's rounds."""
    parser.add_argument("--pgm-python", type=Path, help="the interpreter of Private-PGM's venv (jax 0.7, pandas < 3)")
    parser.add_argument("--pgm-source", type=Path, help="Private-PGM's source tree (mechanisms/ and src/mbi)")
    parser.add_argument(
        "--pgm-aim-rounds",
        default="",
        help="Private-PGM AIM's T: a number for every dataset and/or NAME=T for one (default 16 d)",
    )
    parser.add_argument(
        "--pgm-minutes",
        type=float,
        help="stop a Private-PGM run after this many minutes (a line says how far it got; left out of the medians)",
    )
    parser.add_argument(
        "--margnet-source",
        type=Path,
        help="Private-PGM's tree at b2f2b81 (pull request #48: mechanisms/margnet.py, src/mbi/nn_generator.py), run "
        "with --pgm-python (which then needs flax)",
    )


def configured(parser: argparse.ArgumentParser, args: argparse.Namespace) -> PrivatePgm | None:
    """Private-PGM from the flags, checked (None when neither is given)."""
    if args.pgm_python is None and args.pgm_source is None:
        if args.margnet_source is not None:
            parser.error("--margnet-source runs with --pgm-python and --pgm-source")
        return None
    if args.pgm_python is None or args.pgm_source is None:
        parser.error("--pgm-python and --pgm-source go together")
    if not os.access(args.pgm_python, os.X_OK):
        parser.error(f"--pgm-python {args.pgm_python}: not an executable")
    for part in ("mechanisms/aim.py", "mechanisms/mst.py", "mechanisms/mechanism.py", "src/mbi/__init__.py"):
        if not (args.pgm_source / part).is_file():
            parser.error(f"--pgm-source {args.pgm_source}: no {part} (Private-PGM's tree at master)")
    margnet = args.margnet_source
    for part in ("mechanisms/margnet.py", "src/mbi/nn_generator.py") if margnet is not None else ():
        if not (margnet / part).is_file():
            parser.error(f"--margnet-source {margnet}: no {part} (Private-PGM's tree at b2f2b81)")
    if args.pgm_minutes is not None and not (math.isfinite(args.pgm_minutes) and args.pgm_minutes > 0):
        parser.error(f"--pgm-minutes {args.pgm_minutes:g}: a number of minutes > 0")
    return PrivatePgm(args.pgm_python, args.pgm_source.resolve(), margnet and margnet.resolve(), args.pgm_minutes)


def report(label: str, fit: PgmFit) -> None:
    """One comment line on stderr: the runner's own seconds, and for AIM the rounds it ran."""
    info = fit.info
    rounds = ""
    if "sigma halved" in info:  # AIM
        rounds = f", {info['rounds measured']} rounds (noise halved {info['sigma halved']} times)"
    if "noise lowered" in info:  # MargNet: its rho a round doubled, the noise divided by sqrt(2)
        rounds = f", {info['rounds measured']} rounds (rho a round doubled {info['noise lowered']} times)"
    print(
        f"# {label}: fit {info['fit seconds']:.1f} s, rows {info['sample seconds']:.1f} s in its process{rounds}",
        file=sys.stderr,
        flush=True,
    )
