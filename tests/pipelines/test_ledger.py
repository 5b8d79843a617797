"""The ledger from the command line: pipelines reserve before reading, the ledger command, dry runs."""

from __future__ import annotations

import datetime
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from beam_data import purchases, write

from beam_expmech import ledger as ledger_module
from beam_expmech.accounting import Release, epsilon_to_zcdp
from beam_expmech.io import writers
from beam_expmech.ledger import Ledger, LedgerError, budget_of
from beam_expmech.releases import queries
from pipelines import cli, console, select
from pipelines import ledger as ledger_cli

SCRIPT = str(Path(sys.executable).with_name("beam-expmech"))  # the console script setup.py installs
# A synthesize run's record: its (epsilon, delta) budget spent as the rho of that epsilon at that delta.
EPSILON, DELTA = 0.75, 1e-6
STORED = {"id", "time", "pipeline", "parameters", "label", "epsilon", "rho", "delta", "output", "status"}


def test_pipelines_reserve_before_reading_and_exit_3_when_spent(tmp_path, capsys, monkeypatch):
    write(purchases(2_000), tmp_path / "data.parquet", "parquet")
    path = str(tmp_path / "ledger.json")
    assert ledger_cli.main(["init", "--budget-ledger", path, "--dataset-id", "shop", "--epsilon", "1.5"]) == 0
    args = ["--input", str(tmp_path / "data.parquet"), "--column", "item", "--candidate-range", "0:50",
            "--epsilon", "1", "--output", str(tmp_path / "r.json"),
            "--budget-ledger", path, "--dataset-id", "shop"]  # fmt: skip
    assert select.main(args) == 0
    capsys.readouterr()
    assert console.run_cli(select.main, args) == 3
    assert "dataset 'shop': 0.5 of its epsilon=1.5" in capsys.readouterr().err
    # The release's pass (Prepared.run's run_pipeline, inside the charge) fails after the reservation.
    monkeypatch.setattr(queries, "run_pipeline", lambda *a, **k: (_ for _ in ()).throw(OSError("worker lost")))
    args[args.index("--epsilon") + 1] = "0.5"
    with pytest.raises(OSError):
        select.main(args)
    assert ledger_cli.main(["show", "--budget-ledger", path, "--dataset-id", "shop"]) == 0
    shown = capsys.readouterr().out
    assert shown.count(" done ") == 1 and shown.count(" failed ") == 1 and "remaining 0" in shown
    assert console.run_cli(select.main, [*args[:-4], "--budget-ledger", path]) == 2  # --dataset-id missing
    # A dataset the ledger has no budget for: the command line says how to set one, the library does not.
    capsys.readouterr()
    assert console.run_cli(select.main, [*args[:-1], "unknown"]) == 2
    assert f"beam-expmech ledger init --budget-ledger {path} --dataset-id unknown" in capsys.readouterr().err
    with pytest.raises(LedgerError, match="has no budget") as raised:
        Ledger(path).dataset("unknown")
    assert "python -m" not in str(raised.value) and "beam-expmech" not in str(raised.value)


def test_the_console_script_runs_every_command(tmp_path):
    script = str(Path(sys.executable).with_name("beam-expmech"))
    path = str(tmp_path / "ledger.json")
    done = subprocess.run([script, "ledger", "init", "--budget-ledger", path, "--dataset-id", "d", "--epsilon", "3"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and "budget epsilon=3" in done.stdout
    shown = subprocess.run([script, "ledger", "show", "--budget-ledger", path, "--dataset-id", "d"],
                           capture_output=True, text=True)  # fmt: skip
    assert "spent 0, remaining 3" in shown.stdout
    wrong = subprocess.run([script, "selec"], capture_output=True, text=True)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "choose a command" in wrong.stderr


def test_dry_run_prints_the_plan_and_spends_nothing(tmp_path, capsys):
    write(purchases(500), tmp_path / "data.parquet", "parquet")
    path = str(tmp_path / "ledger.json")
    Ledger(path).init("shop", epsilon=2.0)
    out = tmp_path / "r.json"
    args = ["--input", str(tmp_path / "data.parquet"), "--column", "item", "--candidate-range", "0:50",
            "--epsilon", "1", "--output", str(out), "--budget-ledger", path, "--dataset-id", "shop",
            "--dry-run"]  # fmt: skip
    assert select.main(args) == 0
    plan = capsys.readouterr().out
    assert "no data read, nothing spent" in plan and "dataset 'shop' has 2 of epsilon=2 left" in plan
    assert '"loss_per_pick"' in plan and "cost: epsilon=1" in plan
    assert not out.exists() and Ledger(path).dataset("shop")["releases"] == []


def _ledger_with_three_releases(path: str) -> None:
    """Dataset "shop": a synthesize-like zCDP release (rho only) with its run's epsilon and delta in its
    parameters, an exponential mechanism's, and a zCDP one whose parameters give no delta to convert at."""
    init = ["ledger", "init", "--budget-ledger", path, "--dataset-id", "shop", "--epsilon", "2", "--delta", str(DELTA)]
    assert cli.main(init) == 0
    ledger = Ledger(path)
    aim = Release.zcdp(epsilon_to_zcdp(EPSILON, delta=DELTA), "AIM")
    with ledger.charged("shop", aim, pipeline="synthesize", parameters={"epsilon": EPSILON, "delta": DELTA},
                        output="synthetic/"):  # fmt: skip
        pass
    ledger.reserve("shop", Release.exponential_mechanism(0.5), pipeline="select",
                   parameters={"epsilon": 0.5, "delta": 0.0}, output="top.json")  # fmt: skip
    ledger.reserve("shop", Release.zcdp(0.001, "AIM"), pipeline="synthesize", parameters={"epsilon": 5.0}, output=None)


def test_show_states_the_epsilon_of_a_zcdp_release_at_its_runs_delta(tmp_path, capsys):
    path = str(tmp_path / "ledger.json")
    _ledger_with_three_releases(path)
    capsys.readouterr()
    assert cli.main(["ledger", "show", "--budget-ledger", path, "--dataset-id", "shop"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # time, pipeline, epsilon, ...: the zCDP release's epsilon derived from its rho and marked; none from
    # parameters["epsilon"] alone (the third release's 5 is not shown)
    assert [line.split()[2] for line in lines[1:4]] == [f"{EPSILON:g}*", "0.5", "-"]
    assert lines[4].startswith("dataset 'shop': epsilon=2 delta=1e-06, spent ") and lines[4].endswith(", 3 releases")
    assert lines[5].startswith("* ") and "rho" in lines[5] and len(lines) == 6
    assert cli.main(["ledger", "show", "--budget-ledger", path, "--dataset-id", "shop", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    stored = Ledger(path).dataset("shop")
    budget = budget_of(stored)
    assert {key: shown[key] for key in ("dataset_id", "epsilon", "delta", "release_count")} == {
        "dataset_id": "shop", "epsilon": 2.0, "delta": DELTA, "release_count": 3}  # fmt: skip
    assert (shown["spent_epsilon"], shown["remaining_epsilon"], shown["remaining_delta"]) == (
        budget.spent(), budget.remaining(), budget.remaining_delta())  # fmt: skip
    aim, exponential, unconvertible = shown["releases"]
    assert [{key: r[key] for key in STORED} for r in shown["releases"]] == stored["releases"]  # as stored
    assert set(aim) == STORED | {"release_id", "attempts", "epsilon_at_delta", "stated_epsilon"}
    assert aim["epsilon"] is None
    assert aim["epsilon_at_delta"] == aim["stated_epsilon"] == pytest.approx(EPSILON, rel=1e-6)
    assert (exponential["epsilon_at_delta"], exponential["stated_epsilon"]) == (None, 0.5)
    assert (unconvertible["epsilon_at_delta"], unconvertible["stated_epsilon"]) == (None, None)


def test_show_without_a_dataset_lists_every_dataset(tmp_path, capsys):
    path = str(tmp_path / "ledger.json")
    for argv in (["--budget-ledger", path], ["--budget-ledger", path, "--json"]):  # no ledger yet: nothing
        assert cli.main(["ledger", "show", *argv]) == 0
    empty, empty_json = capsys.readouterr().out.split("\n", 1)
    assert empty.startswith("no datasets in ") and json.loads(empty_json) == []
    assert not Path(path).exists()
    _ledger_with_three_releases(path)
    assert cli.main(["ledger", "init", "--budget-ledger", path, "--dataset-id", "new", "--epsilon", "1"]) == 0
    capsys.readouterr()
    assert cli.main(["ledger", "show", "--budget-ledger", path]) == 0
    new, shop = capsys.readouterr().out.splitlines()
    assert new == "dataset 'new': epsilon=1 delta=0, spent 0, remaining 1 (and 0 of delta), 0 releases"
    assert shop.startswith("dataset 'shop': epsilon=2 delta=1e-06, spent ") and shop.endswith(", 3 releases")
    assert cli.main(["ledger", "show", "--budget-ledger", path, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(d["dataset_id"], d["release_count"], d["spent_epsilon"]) for d in listed] == [
        ("new", 0, 0.0), ("shop", 3, budget_of(Ledger(path).dataset("shop")).spent())]  # fmt: skip
    assert listed[1]["remaining_epsilon"] == pytest.approx(2 - listed[1]["spent_epsilon"])
    assert "releases" not in listed[1]


def test_show_refuses_an_unknown_dataset_and_a_file_that_is_not_a_ledger_in_one_line(tmp_path, capsys):
    path = str(tmp_path / "ledger.json")
    Ledger(path).init("shop", epsilon=1.0)
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    for argv, message in (
        (["--budget-ledger", path, "--dataset-id", "nope"], "dataset 'nope' has no budget"),
        (["--budget-ledger", path, "--dataset-id", "nope", "--json"], "dataset 'nope' has no budget"),
        (["--budget-ledger", str(tmp_path / "data.csv")], "not a valid ledger"),
        (["--budget-ledger", str(tmp_path / "data.csv"), "--dataset-id", "shop", "--json"], "not a valid ledger"),
    ):
        assert cli.main(["ledger", "show", *argv]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("error: ") and err.count("\n") == 1 and message in err, err


def test_the_console_script_prints_the_ledger_as_json_and_nothing_else(tmp_path):
    path = str(tmp_path / "ledger.json")
    _ledger_with_three_releases(path)
    show = [SCRIPT, "ledger", "show", "--budget-ledger", path, "--json"]
    shown = json.loads(
        subprocess.run([*show, "--dataset-id", "shop"], capture_output=True, text=True, check=True).stdout
    )
    assert shown["releases"][0]["stated_epsilon"] == pytest.approx(EPSILON, rel=1e-6)
    listed = json.loads(subprocess.run(show, capture_output=True, text=True, check=True).stdout)
    assert listed == [{key: value for key, value in shown.items() if key != "releases"}]


def test_show_reads_a_ledger_written_before_releases_had_a_delta(tmp_path, capsys):
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("shop", epsilon=2.0)
    ledger.reserve("shop", Release.exponential_mechanism(1.0), pipeline="select", parameters={}, output="o.json")
    document = json.loads((tmp_path / "ledger.json").read_text())
    del document["datasets"]["shop"]["releases"][0]["delta"]  # as such ledgers were written
    (tmp_path / "ledger.json").write_text(json.dumps(document))
    capsys.readouterr()
    assert ledger_cli.main(["show", "--budget-ledger", ledger.path, "--dataset-id", "shop"]) == 0
    assert "select" in capsys.readouterr().out
    assert ledger_cli.main(["show", "--budget-ledger", ledger.path, "--dataset-id", "shop", "--json"]) == 0
    (release,) = json.loads(capsys.readouterr().out)["releases"]
    assert release["delta"] == 0.0 and release["stated_epsilon"] == 1.0


def named_select(tmp_path, output, release_id: str | None = "top", *, budget: float = 3.0,
                 flags: tuple[str, ...] = ()) -> tuple[list[str], str]:  # fmt: skip
    """Purchases in data.parquet, a ledger whose dataset "shop" has ``budget``, and the flags of a select of them at
    epsilon 1 into ``output``, charged there and named ``release_id`` (last); and the ledger's path."""
    write(purchases(2_000), tmp_path / "data.parquet", "parquet")
    path = str(tmp_path / "ledger.json")
    Ledger(path).init("shop", epsilon=budget)
    args = ["--input", str(tmp_path / "data.parquet"), "--column", "item", "--candidate-range", "0:50",
            "--epsilon", "1", *flags, "--output", str(output), "--budget-ledger", path,
            "--dataset-id", "shop"]  # fmt: skip
    return (args if release_id is None else [*args, "--release-id", release_id]), path


def test_a_release_id_from_the_command_line_is_charged_once_and_written_once(tmp_path, capsys, monkeypatch):
    """A scheduler's retry and re-trigger: the first attempt fails after its charge, the second runs under that
    charge, the third finds it done (exit 0, nothing read: its output untouched), other parameters are refused."""
    out = tmp_path / "2026-12-01" / "top.json"
    args, path = named_select(tmp_path, out, "top/2026-12-01", budget=1.5)
    lost = monkeypatch.setattr  # the release's pass fails after the reservation, as a lost worker would
    lost(queries, "run_pipeline", lambda *a, **k: (_ for _ in ()).throw(OSError("worker lost")))
    with pytest.raises(OSError):
        select.main(args)
    monkeypatch.undo()
    assert console.run_cli(select.main, args) == 0  # the retry: 1 of 1.5 spent, not 2
    (record,) = Ledger(path).dataset("shop")["releases"]
    assert (record["status"], record["attempts"], record["release_id"]) == ("done", 2, "top/2026-12-01")
    assert budget_of(Ledger(path).dataset("shop")).spent() == pytest.approx(1.0)
    written = out.stat()
    capsys.readouterr()

    monkeypatch.setattr(queries, "run_pipeline", lambda *a, **k: pytest.fail("a done release read its data"))
    assert console.run_cli(select.main, args) == 0
    said = capsys.readouterr()
    assert said.out == f"release 'top/2026-12-01' of dataset 'shop' is done already ({out}): nothing read, " \
                       "nothing spent\n" and said.err == ""  # fmt: skip
    assert out.stat().st_mtime_ns == written.st_mtime_ns and out.stat().st_ino == written.st_ino
    assert console.run_cli(select.main, [*args, "--dry-run"]) == 0
    assert "release 'top/2026-12-01': done already" in capsys.readouterr().out

    other = [*args]
    other[other.index("--epsilon") + 1] = "0.5"
    assert console.run_cli(select.main, other) == 2
    assert "charged for another release (parameter epsilon differs)" in capsys.readouterr().err
    assert console.run_cli(select.main, [*args[:-6], "--release-id", "x"]) == 2  # no ledger to remember it
    assert "a release id goes with a ledger" in capsys.readouterr().err
    assert len(Ledger(path).dataset("shop")["releases"]) == 1


def test_a_retry_after_an_attempt_that_wrote_and_died_marks_it_done_and_writes_nothing(tmp_path, capsys,
                                                                                       monkeypatch):  # fmt: skip
    """The attempt wrote its release, then died before the ledger said so: the next attempt finds the release
    complete (its manifest, written last), marks it done and draws nothing."""
    out = tmp_path / "top.csv"
    args, path = named_select(tmp_path, out)
    finish = Ledger.finish

    def dies_before_done(self, dataset_id, record_id, status, **attempt):
        if status == "done":
            raise KeyboardInterrupt  # the process killed between the write and the ledger's update
        finish(self, dataset_id, record_id, status, **attempt)

    monkeypatch.setattr(Ledger, "finish", dies_before_done)
    with pytest.raises(KeyboardInterrupt):
        select.main(args)
    monkeypatch.setattr(Ledger, "finish", finish)
    assert [r["status"] for r in Ledger(path).dataset("shop")["releases"]] == ["reserved"]  # it never said
    assert console.run_cli(select.main, args) == console.JOB_ERROR  # its lease holds: it may still be running
    assert "has an attempt running" in capsys.readouterr().err
    later = ledger_module._clock() + datetime.timedelta(seconds=ledger_module.LEASE_SECONDS + 1)
    monkeypatch.setattr(ledger_module, "_clock", lambda: later)  # the dead attempt's lease has run out
    table, manifest = out.read_bytes(), (tmp_path / "top.manifest.json").read_bytes()
    monkeypatch.setattr(queries, "run_pipeline", lambda *a, **k: pytest.fail("a written release drew again"))
    capsys.readouterr()
    assert console.run_cli(select.main, args) == 0
    assert "is done already" in capsys.readouterr().out
    (record,) = Ledger(path).dataset("shop")["releases"]
    assert (record["status"], record["attempts"]) == ("done", 2)
    assert out.read_bytes() == table and (tmp_path / "top.manifest.json").read_bytes() == manifest
    assert budget_of(Ledger(path).dataset("shop")).spent() == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["top.csv", "top[1].csv"])  # a name that is a glob pattern is still itself
def test_a_retry_after_an_attempt_that_left_a_table_without_its_manifest_is_refused(tmp_path, capsys, monkeypatch,
                                                                                     name):  # fmt: skip
    """The table was written, its manifest was not (a 503 on the manifest): the table may have been read, so a
    second draw under the same charge is refused; the table is left as it is, nothing more spent."""
    out = tmp_path / name
    args, path = named_select(tmp_path, out, flags=("--top-k", "5"))
    write_atomically = writers.write_atomically

    def manifest_fails(target, data):
        if str(target).endswith(".manifest.json"):
            raise OSError("503 (injected)")
        write_atomically(target, data)

    monkeypatch.setattr(writers, "write_atomically", manifest_fails)
    assert console.run_cli(select.main, args) == console.JOB_ERROR
    monkeypatch.undo()
    table = out.read_bytes()
    capsys.readouterr()
    assert console.run_cli(select.main, args) == console.USAGE_ERROR
    assert f"an earlier attempt left {out}, a draw that may have been seen" in capsys.readouterr().err
    assert out.read_bytes() == table and not out.with_name(out.stem + ".manifest.json").exists()
    (record,) = Ledger(path).dataset("shop")["releases"]
    assert (record["status"], record["attempts"]) == ("failed", 2)
    assert budget_of(Ledger(path).dataset("shop")).spent() == pytest.approx(1.0)


def test_a_named_release_is_checked_against_the_ledger_before_its_input(tmp_path, capsys):
    """Done: its input may be gone (retention), it still exits 0 having read nothing; its candidates or quantiles
    changed are another release (refused, the dry run too); a test seed never goes with a release id."""
    args, path = named_select(tmp_path, tmp_path / "top.json")
    data = tmp_path / "data.parquet"
    assert console.run_cli(select.main, args) == 0
    data.unlink()
    capsys.readouterr()
    assert console.run_cli(select.main, args) == 0
    assert "is done already" in capsys.readouterr().out
    other = [*args]
    other[other.index("--candidate-range") + 1] = "100:150"
    for changed in (other, [*other, "--dry-run"]):
        assert console.run_cli(select.main, changed) == console.USAGE_ERROR
        assert "charged for another release (parameter candidates_sha256 differs)" in capsys.readouterr().err
    assert console.run_cli(select.main, [*args[:-1], "other", "--seed", "3"]) == console.USAGE_ERROR
    assert "a named release may not take one" in capsys.readouterr().err
    assert len(Ledger(path).dataset("shop")["releases"]) == 1


def test_another_release_at_the_output_is_no_trace_of_this_one(tmp_path, capsys, monkeypatch):
    """latest.json, written each day by that day's release: day two's retry finds day one's document (another
    release id, whole), not a draw of its own, and runs under its charge."""
    args, path = named_select(tmp_path, tmp_path / "latest.json", None)
    args.append("--release-id")
    assert console.run_cli(select.main, [*args, "day1"]) == 0
    monkeypatch.setattr(queries, "run_pipeline", lambda *a, **k: (_ for _ in ()).throw(OSError("worker lost")))
    with pytest.raises(OSError):
        select.main([*args, "day2"])
    monkeypatch.undo()
    assert console.run_cli(select.main, [*args, "day2"]) == 0
    assert json.loads((tmp_path / "latest.json").read_text())["release_id"] == "day2"
    records = Ledger(path).dataset("shop")["releases"]
    assert [(r["release_id"], r["status"], r["attempts"]) for r in records] == [
        ("day1", "done", 1),
        ("day2", "done", 2),
    ]


def test_a_job_that_lost_its_release_id_publishes_nothing(tmp_path, capsys, monkeypatch):
    """Its renewals fail (the ledger out of reach) and its lease runs short while it runs: the job's last step
    finds it out and writes nothing; a later attempt, holding the id, publishes under the same charge."""
    out = tmp_path / "top.json"
    args, path = named_select(tmp_path, out)
    monkeypatch.setattr(ledger_module, "LEASE_SECONDS", 0.6)  # renewals every 0.12 s: each fails
    monkeypatch.setattr(Ledger, "_renew", lambda *a: (_ for _ in ()).throw(OSError("ledger out of reach")))
    assert console.run_cli(select.main, args) == console.JOB_ERROR
    assert "LostReleaseError" in capsys.readouterr().err and not out.exists()
    monkeypatch.undo()
    assert console.run_cli(select.main, args) == 0 and out.exists()
    (record,) = Ledger(path).dataset("shop")["releases"]
    assert (record["status"], record["attempts"]) == ("done", 2)
    assert budget_of(Ledger(path).dataset("shop")).spent() == pytest.approx(1.0)


def test_run_cli_gives_back_a_host_s_own_sigterm_handler():
    def host(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, host)
    try:
        assert console.run_cli(lambda argv: 0, []) == 0
        assert signal.getsignal(signal.SIGTERM) is host
    finally:
        signal.signal(signal.SIGTERM, previous)
