"""The budget ledger: set once, every release recorded, refuse overspending, survive races and power cuts."""

from __future__ import annotations

import datetime
import json
import os
import stat
import time

import pytest

from beam_expmech import ledger as ledger_module
from beam_expmech.accounting import Release
from beam_expmech.ledger import (
    AlreadyReleased,
    LeaseGuard,
    Ledger,
    LedgerError,
    LostReleaseError,
    OverspendError,
    ReleaseBusyError,
    budget_of,
)


def test_approximate_releases_keep_their_delta_in_the_ledger(tmp_path):
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=2.0, delta=1e-6)
    keys = Release.approximate(0.5, 6e-7, "keys")
    ledger.reserve("d", keys, pipeline="select", parameters={}, output=None)
    # 1.2e-6 of delta: refused, though epsilon would fit
    with pytest.raises(OverspendError, match=r"4e-07 of its delta=1e-06\) remains"):
        ledger.reserve("d", keys, pipeline="select", parameters={}, output=None)
    (record,) = json.loads((tmp_path / "ledger.json").read_text())["datasets"]["d"]["releases"]
    assert (record["epsilon"], record["rho"], record["delta"]) == (0.5, None, 6e-7)
    assert budget_of(ledger.dataset("d")).releases == (keys,)


def test_budget_is_set_once_and_every_release_is_recorded(tmp_path):
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=2.0)
    with pytest.raises(LedgerError, match="already has a budget"):
        ledger.init("d", epsilon=9.0)
    first = ledger.reserve("d", Release.pure(0.5, "a"), pipeline="select", parameters={"k": 1}, output="o.json")
    ledger.finish("d", first, "done")
    with (
        pytest.raises(RuntimeError, match="boom"),
        ledger.charged("d", Release.exponential_mechanism(1.0, "b"), pipeline="learn", parameters={}, output=None),
    ):
        raise RuntimeError("boom")
    dataset = ledger.dataset("d")
    assert [(r["pipeline"], r["status"]) for r in dataset["releases"]] == [("select", "done"), ("learn", "failed")]
    assert budget_of(dataset).spent() == pytest.approx(1.5)  # the failed run keeps its charge
    with pytest.raises(OverspendError, match=r"dataset 'd': 0\.5 of its epsilon=2 .* asks for epsilon=0\.6"):
        ledger.reserve("d", Release.pure(0.6, "c"), pipeline="select", parameters={}, output=None)
    assert len(ledger.dataset("d")["releases"]) == 2  # the refused run recorded nothing
    with pytest.raises(LedgerError, match="has no budget"):
        ledger.reserve("other", Release.pure(0.1, "x"), pipeline="select", parameters={}, output=None)


def test_datasets_are_every_dataset_as_stored_and_a_file_that_is_not_a_ledger_is_refused(tmp_path):
    ledger = Ledger(str(tmp_path / "ledger.json"))
    assert ledger.datasets() == {}  # no file yet: none, and none created
    assert not (tmp_path / "ledger.json").exists()
    ledger.init("a", epsilon=1.0)
    ledger.init("b", epsilon=2.0, delta=1e-6)
    ledger.reserve("b", Release.zcdp(0.01, "aim"), pipeline="synthesize", parameters={"delta": 1e-6}, output=None)
    stored = json.loads((tmp_path / "ledger.json").read_text())["datasets"]
    assert ledger.datasets() == stored and list(stored) == ["a", "b"]
    assert [r["rho"] for r in ledger.datasets()["b"]["releases"]] == [0.01]
    for text, reason in (("not json", "not JSON"), ('{"version": 1}', "no datasets"), ("[]", "version")):
        (tmp_path / "other.json").write_text(text)
        with pytest.raises(LedgerError, match=reason) as raised:
            Ledger(str(tmp_path / "other.json")).datasets()
        assert isinstance(raised.value, ValueError)  # the command line's usage error: one line, exit code 2


def test_a_reservation_survives_a_power_cut_the_file_then_its_folder_flushed_after_the_rename(tmp_path, monkeypatch):
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=2.0)
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.fstat(fd).st_ino, stat.S_ISDIR(os.fstat(fd).st_mode)))
        real_fsync(fd)

    def replace(source, target):
        events.append(("rename",))
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    ledger.reserve("d", Release.pure(0.5, "a"), pipeline="select", parameters={}, output=None)
    ledger_file, folder = (tmp_path / "ledger.json").stat().st_ino, tmp_path.stat().st_ino
    # the data, then the rename, then the folder that holds the rename
    assert events == [("fsync", ledger_file, False), ("rename",), ("fsync", folder, True)]


def test_zcdp_releases_need_a_delta_and_compose_in_rho(tmp_path):
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=1.0, delta=1e-9)
    ledger.reserve("d", Release.zcdp(0.01, "aim"), pipeline="synthesize", parameters={}, output=None)
    with pytest.raises(OverspendError):
        ledger.reserve("d", Release.zcdp(0.01, "aim"), pipeline="synthesize", parameters={}, output=None)


def test_a_gs_ledger_on_the_emulator(gcs_emulator):
    path = "gs://test-bucket/ledgers/budget.json"
    ledger = Ledger(path)
    ledger.init("d", epsilon=2.0)
    for _ in range(2):
        ledger.reserve("d", Release.pure(1.0, "one"), pipeline="test", parameters={}, output=None)
    with pytest.raises(OverspendError):
        ledger.reserve("d", Release.pure(1.0, "one"), pipeline="test", parameters={}, output=None)
    assert len(Ledger(path).dataset("d")["releases"]) == 2


def emulator_enforces_preconditions(client) -> bool:
    from google.api_core import exceptions

    blob = client.bucket("test-bucket").blob("probe/generation")
    blob.upload_from_string(b"1")
    try:
        client.bucket("test-bucket").blob("probe/generation").upload_from_string(b"2", if_generation_match=0)
    except exceptions.PreconditionFailed:
        return True
    return False


def test_the_race_is_refereed_by_a_server_that_enforces_preconditions(gcs_server_with_preconditions):
    """The races of concurrent runs (tests/pipelines/test_failure_injection.py, through the command line, on a
    local file and on gs://) need a server that refuses a write whose generation moved."""
    assert emulator_enforces_preconditions(gcs_server_with_preconditions)


def test_a_release_id_is_charged_once_run_again_after_a_failure_and_done_once(tmp_path):
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=2.0)
    release, details = Release.pure(0.5, "a"), {"pipeline": "select", "parameters": {"k": 1}, "output": "o.json"}
    with pytest.raises(OSError), ledger.charged("d", release, release_id="top/2026-12-01", **details):
        raise OSError("worker lost")  # after the charge: the data may have been read
    again = ledger.reserve("d", release, release_id="top/2026-12-01", **details)
    (record,) = ledger.dataset("d")["releases"]
    assert (record["id"], record["status"], record["attempts"]) == (again, "reserved", 2)
    assert budget_of(ledger.dataset("d")).spent() == pytest.approx(0.5)  # charged once
    ledger.finish("d", again, "done")
    with pytest.raises(AlreadyReleased, match=r"'top/2026-12-01' of dataset 'd' is done already \(o\.json\)"):
        ledger.reserve("d", release, release_id="top/2026-12-01", **details)
    with pytest.raises(LedgerError, match=r"charged for another release \(epsilon differs\)"):
        ledger.reserve("d", Release.pure(0.7, "a"), release_id="top/2026-12-01", **details)
    with pytest.raises(LedgerError, match="parameter k differs"):
        ledger.reserve("d", release, release_id="top/2026-12-01", **{**details, "parameters": {"k": 2}})
    ledger.reserve("d", release, release_id="top/2026-12-02", **details)  # another id: another charge
    assert budget_of(ledger.dataset("d")).spent() == pytest.approx(1.0)
    assert len(ledger.dataset("d")["releases"]) == 2


def test_an_attempt_that_wrote_its_release_and_died_is_marked_done_and_a_trace_of_a_draw_is_refused(tmp_path):
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=2.0)
    release, details = Release.pure(0.5, "a"), {"pipeline": "select", "parameters": {}, "output": "o.json"}
    ran = []
    with ledger.charged("d", release, release_id="r", drawn=lambda: (True, None), **details):
        ran.append(1)  # a first attempt runs whatever is at its output: the id is new
    for record_id in [r["id"] for r in ledger.dataset("d")["releases"]]:
        ledger.finish("d", record_id, "failed")  # as if it died before it said so
    with pytest.raises(AlreadyReleased), ledger.charged("d", release, release_id="r", drawn=lambda: (True, None),
                                                        **details):  # fmt: skip
        ran.append(2)
    assert ran == [1] and [r["status"] for r in ledger.dataset("d")["releases"]] == ["done"]

    trace = str(tmp_path / "t.csv")  # a table without its manifest: a draw that may have been read
    ledger.reserve("d", release, release_id="s", **details)
    ledger.finish("d", ledger.dataset("d")["releases"][-1]["id"], "failed")
    with pytest.raises(LedgerError, match=r"left .*t\.csv, a draw that may have been seen; drawing again needs"), \
            ledger.charged("d", release, release_id="s", drawn=lambda: (False, trace), **details):  # fmt: skip
        ran.append(3)
    assert ran == [1] and budget_of(ledger.dataset("d")).spent() == pytest.approx(1.0)


def test_an_attempt_holds_its_release_id_while_it_runs_and_loses_it_when_its_lease_runs_out(tmp_path, monkeypatch):
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=2.0)
    release, details = Release.pure(0.5, "a"), {"pipeline": "select", "parameters": {}, "output": "o.json"}
    first = ledger.reserve("d", release, release_id="r", **details)  # running, or died without a word
    with pytest.raises(ReleaseBusyError, match="'r' of dataset 'd' has an attempt running"):
        ledger.reserve("d", release, release_id="r", **details)
    (record,) = ledger.dataset("d")["releases"]
    assert record["attempts"] == 1 and record["status"] == "reserved"

    stale = record["attempt"]
    later = ledger_module._clock() + datetime.timedelta(seconds=ledger_module.LEASE_SECONDS + 1)
    monkeypatch.setattr(ledger_module, "_clock", lambda: later)  # the first attempt's lease has run out
    ledger.reserve("d", release, release_id="r", **details)
    (record,) = ledger.dataset("d")["releases"]
    assert record["attempts"] == 2 and record["attempt"] != stale
    with pytest.raises(LostReleaseError, match="another attempt took it over"):
        ledger.finish("d", first, "done", attempt=stale)  # the first attempt, late: it may not say done
    with pytest.raises(LostReleaseError, match="another attempt holds it; this one publishes nothing"):
        LeaseGuard(ledger.path, "d", "r", stale)()  # nor publish: its job's last step asks first
    LeaseGuard(ledger.path, "d", "r", record["attempt"])()  # the attempt that holds it may
    assert ledger.dataset("d")["releases"][0]["status"] == "reserved"
    assert budget_of(ledger.dataset("d")).spent() == pytest.approx(0.5)


def test_a_job_whose_lease_was_not_renewed_publishes_nothing(tmp_path, monkeypatch):
    """The ledger could not be reached to renew: with less than half a lease left, the last step refuses."""
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=2.0)
    ledger.reserve("d", Release.pure(0.5, "a"), release_id="r", pipeline="select", parameters={}, output="o.json")
    (record,) = ledger.dataset("d")["releases"]
    guard = LeaseGuard(ledger.path, "d", "r", record["attempt"])
    guard()  # a whole lease ahead
    later = ledger_module._clock() + datetime.timedelta(seconds=ledger_module.LEASE_SECONDS * 0.6)
    monkeypatch.setattr(ledger_module, "_clock", lambda: later)  # 0.6 of the lease gone, no renewal
    with pytest.raises(LostReleaseError, match="its lease is running out"):
        guard()


def test_a_running_attempt_renews_its_lease(tmp_path, monkeypatch):
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=2.0)
    monkeypatch.setattr(ledger_module, "LEASE_SECONDS", 0.5)  # renewed every 0.1 s
    details = {"pipeline": "select", "parameters": {}, "output": "o.json"}
    with ledger.charged("d", Release.pure(0.5, "a"), release_id="r", **details):
        leases = set()
        for _ in range(10):
            leases.add(ledger.dataset("d")["releases"][0]["lease_until"])
            time.sleep(0.2)
        with pytest.raises(ReleaseBusyError):  # held all along, well past one lease
            ledger.reserve("d", Release.pure(0.5, "a"), release_id="r", **details)
    assert len(leases) >= 2 and ledger.dataset("d")["releases"][0]["status"] == "done"


def test_init_exist_ok_sets_a_budget_once_and_refuses_another(tmp_path):
    ledger = Ledger(str(tmp_path / "ledger.json"))
    assert ledger.init("d/2026-12-01", epsilon=1.0, delta=1e-6, exist_ok=True) is True
    assert ledger.init("d/2026-12-01", epsilon=1.0, delta=1e-6, exist_ok=True) is False
    with pytest.raises(LedgerError, match=r"has another budget .*epsilon=1, delta=1e-06"):
        ledger.init("d/2026-12-01", epsilon=2.0, delta=1e-6, exist_ok=True)
    with pytest.raises(ValueError):
        ledger.init("e", epsilon=-1.0, exist_ok=True)
    assert list(ledger.datasets()) == ["d/2026-12-01"]
