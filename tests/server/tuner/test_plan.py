"""`perfkit plan`: replicas for a target rate from tune and profile records (synthetic records
for the arithmetic and the messages), and the plan checked on real servers: one server that
cannot carry a plan made from an inflated record (exit 5), and a two-server fleet on Ray
that carries the plan made from a real profile of one of them."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.capacity import evidence_from_run, evidence_from_tune, parse_percent, parse_rate_rps, plan_capacity
from perfkit.cli import main
from perfkit.errors import ExitCode, InputError, UsageError
from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.records import Budget, Confirmation, LoadLevel, Machine, Precision, RunRecord, TrialRecord, TuneRecord
from perfkit.server import LocalLaunch, launch_local

C16 = LoadLevel("concurrency", 16.0)
R900 = LoadLevel("request_rate", 900.0, "poisson")


def _tune(conf: Confirmation | None, budget_ms: float = 50.0) -> TuneRecord:
    best = TrialRecord(3, "complete", {"max_batch_size": 32}, R900, 950.0, 41_000.0, True, confirmation=conf)
    return TuneRecord("0", "now", (), Machine.from_mapping({}), {}, "hungry", Budget(budget_ms, 99.0), "throughput", "",
                      None, 3, (best,))  # fmt: skip


CONF = Confirmation(True, R900, 3, 880.0, 800.0, 960.0, 45_000.0, 48_000.0)


def test_rates_and_percentages_parse():
    assert parse_rate_rps("20000/s") == 20000 and parse_rate_rps("20k/s") == 20000 and parse_rate_rps("300rps") == 300
    assert parse_percent("30%") == pytest.approx(0.3) and parse_percent("0.3") == pytest.approx(0.3)
    with pytest.raises(UsageError):
        parse_rate_rps("fast")
    with pytest.raises(UsageError):
        parse_percent("-5%")


def test_a_plan_sizes_the_fleet_on_the_intervals_low_end_with_headroom():
    evidence, notes = evidence_from_tune(_tune(CONF))
    assert evidence.open_loop and evidence.rate_rps == 880.0 and (evidence.low_rps, evidence.high_rps) == (800, 960)
    plan = plan_capacity(evidence, target_rps=20_000, headroom=0.3, notes=notes)
    assert plan.replicas == 33  # 26,000 / 800 = 32.5
    assert plan.replicas_at_point == 30  # 26,000 / 880 = 29.5
    text = "\n".join(plan.lines())
    assert "replicas: 33" in text and "95% interval 800.0-960.0" in text and "confirmed in 3 runs" in text
    assert plan.to_json()["evidence"]["interval_rps"] == [800.0, 960.0]
    # unconfirmed: the single reading, said so
    evidence, notes = evidence_from_tune(_tune(None))
    assert evidence.low_rps == evidence.rate_rps == 950.0 and any("unconfirmed" in n for n in notes)
    with pytest.raises(UsageError, match="tighter"):
        evidence_from_tune(_tune(CONF), latency_budget_ms=20)
    demoted = dataclasses.replace(CONF, held=False)
    with pytest.raises(InputError, match="recommends no config"):
        evidence_from_tune(_tune(demoted))


def test_a_profile_record_gives_its_highest_level_within_budget():
    levels = [synthetic_level(concurrency=c, latency_ms=5.0 + c, noise=0.0) for c in (1, 2, 4, 8)]
    levels = [dataclasses.replace(lv, precision=Precision(0.05, 0.05)) for lv in levels]
    rec = synthetic_record(levels, model="m")
    evidence, notes = evidence_from_run(rec, latency_budget_ms=15.0)  # p99 = 1.3 x (5 + c): c=4 is the last within
    assert evidence.load == "concurrency 4" and not evidence.open_loop and any("closed-loop" in n for n in notes)
    assert evidence.low_rps == pytest.approx(evidence.rate_rps * 0.95)
    with pytest.raises(InputError, match="no level"):
        evidence_from_run(rec, latency_budget_ms=1.0)
    with pytest.raises(UsageError):
        evidence_from_run(rec, latency_budget_ms=None)


def test_cli_prints_the_plan_and_its_json(tmp_path: Path, capsys):
    folder = tmp_path / "tune"
    folder.mkdir()
    _tune(CONF).save(folder / "tune.json")
    rc = main(
        ["plan", str(folder), "--target-rate", "20k/s", "--headroom", "30%", "--json", "-o", str(tmp_path / "p.json")]
    )
    out = capsys.readouterr().out
    assert rc == 0
    data = json.loads(out)
    assert data["replicas"] == 33 and json.loads((tmp_path / "p.json").read_text()) == data
    page = tmp_path / "plan.html"
    assert main(["plan", str(folder), "--target-rate", "20k/s", "--report", str(page)]) == 0
    html = page.read_text()
    assert "33 replicas for 20,000 req/s" in html and "800.0–960.0" in html and "confirmed in 3 runs" in html
    capsys.readouterr()
    rc = main(["plan", str(folder), "--target-rate", "20k/s", "-u", "a:8000", "-u", "b:8000"])
    assert rc == ExitCode.USAGE and "--ray" in capsys.readouterr().err


def _profile(url: str, out: Path, rate: float) -> None:
    proc = subprocess.run([sys.executable, "-m", "perfkit", "profile", "-m", "queue", "-u", url, "--request-rate-range",
                           f"{rate:g}", "--measurement-interval", "1000", "-r", "5", "-o", str(out)],
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.usefixtures("tritonserver")
def test_a_plan_the_server_cannot_carry_is_not_verified(model_repo: Path, tmp_path: Path, capsys):
    with launch_local(LocalLaunch(model_repo, models=["queue"])) as server:
        run = tmp_path / "run.json"
        _profile(server.endpoints.http_url, run, 30)
        rec = RunRecord.load(run)
        # The record claims ten times what was measured: the plan it gives must fail on the server.
        lv = rec.levels[0]
        inflated = dataclasses.replace(lv, completed_rps=lv.completed_rps * 10, sent_rps=lv.sent_rps * 10,
                                       load=LoadLevel("request_rate", 300.0, "poisson"))  # fmt: skip
        dataclasses.replace(rec, levels=(inflated,)).save(tmp_path / "inflated.json")
        # A budget far above the queue's latency: what fails is the rate (the backlog grows past ~100 req/s).
        rc = main(["plan", str(tmp_path / "inflated.json"), "--target-rate", "250/s", "--latency-budget", "2s",
                   "--headroom", "0%", "-u", server.endpoints.http_url, "--duration", "6s"])  # fmt: skip
        out = capsys.readouterr()
    assert rc == ExitCode.MEASUREMENT, out.out + out.err
    assert "replicas: 1" in out.out and "NOT verified: 1 server(s) at 250 req/s" in out.out


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.slow
def test_a_plan_is_verified_on_a_two_server_fleet(model_repo: Path, ray_cluster: str, tmp_path: Path, capsys):
    with (
        launch_local(LocalLaunch(model_repo, models=["queue"])) as a,
        launch_local(LocalLaunch(model_repo, models=["queue"])) as b,
    ):
        run = tmp_path / "run.json"
        _profile(a.endpoints.http_url, run, 40)
        rc = main(["plan", str(run), "--target-rate", "60/s", "--latency-budget", "500ms", "--headroom", "20%",
                   "-u", a.endpoints.http_url, "-u", b.endpoints.http_url, "--ray", ray_cluster, "--duration", "8s",
                   "-o", str(tmp_path / "plan.json")])  # fmt: skip
        out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["replicas"] >= 2 and plan["evidence"]["open_loop"]  # 72 req/s with headroom over ~40 each
    assert plan["verification"]["held"] and "verified: 2 server(s) at " in out.out
