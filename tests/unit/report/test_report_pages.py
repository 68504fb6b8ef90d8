"""Report pages from the committed fixtures: content, tables, embedded data, offline-ness, and the CLI."""

from __future__ import annotations

import dataclasses
import html
import json
import re
import shutil
from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.errors import InputError
from perfkit.gate import GateOptions, parse_job_noise
from perfkit.records import RunRecord, to_dict
from perfkit.report import load_inputs, write_comparison_report, write_profile_report, write_tune_report

RECORDS = Path(__file__).resolve().parents[3] / "fixtures" / "records"
MAX_BYTES = 3 * 2**20

SENTENCE = (
    "Best: trial 7 (max_batch_size 8, dynamic batching with 500 µs queue delay, 2 instances, fp16) gives "
    "1,840 infer/s at p99 14.2 ms, 3.1× the original config's 590 infer/s, within the 20 ms budget."
)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _visible(page: str) -> str:
    """The page's text with tags stripped and entities decoded (scripts and SVGs dropped)."""
    page = re.sub(r"<script.*?</script>|<svg.*?</svg>|<style.*?</style>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _table(page: str, key: str) -> list[list[str]]:
    m = re.search(rf'<div class="tablewrap" data-table="{re.escape(key)}">(.*?)</table>', page, flags=re.S)
    assert m, f"no table {key}"
    rows = re.findall(r"<tr>(.*?)</tr>", m.group(1), flags=re.S)
    return [[html.unescape(c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r, flags=re.S)] for r in rows]


def assert_self_contained(page: str) -> None:
    """No resource the browser would fetch: no src/href to a URL, no <link>, no @import or url(http...)."""
    assert not re.search(r"""\b(src|href)\s*=\s*["']?\s*(https?:)?//""", page, flags=re.I)
    assert not re.search(r"<link\b|@import|url\(\s*['\"]?(https?:)?//", page, flags=re.I)
    assert "<iframe" not in page and "<img" not in page


@pytest.fixture(scope="module")
def conc() -> RunRecord:
    return RunRecord.load(RECORDS / "profile_concurrency.json")


@pytest.fixture(scope="module")
def profile_page(tmp_path_factory, conc) -> str:
    path = write_profile_report([conc], tmp_path_factory.mktemp("r") / "profile.html")
    assert 0 < path.stat().st_size < MAX_BYTES
    return _text(path)


def test_profile_report_says_what_was_measured(profile_page, conc):
    text = _visible(profile_page)
    for expected in (
        "batcher",
        "Triton 2.52.0",
        "perfkit profile -m batcher --concurrency-range 1:32:2x -o run.json",
        conc.created_utc,
        "bench-07",
        "NVIDIA H100 80GB HBM3",
        "dynamic batching (500 µs queue delay)",
        "2 × CPU instances",
        conc.model.served_config_sha256,
    ):
        assert expected in text, expected
    assert "0.1.0" in text


def test_profile_report_has_every_section_and_figure(profile_page):
    for sid in ("curve", "measured", "distribution", "server", "gpu", "quality"):
        assert f'<section id="{sid}">' in profile_page
    for key in ("throughput-latency", "cdf-service", "server-breakdown", "batch-sizes", "gpu-util", "gpu-memory"):
        assert f'data-figure="{key}"' in profile_page
    assert profile_page.count("<svg") >= 7
    assert_self_contained(profile_page)


def test_profile_tables_hold_the_numbers(profile_page, conc):
    rows = _table(profile_page, "levels")
    assert rows[0][:3] == ["load", "batch", "infer/s"]
    for row, lv in zip(rows[1:], conc.levels):
        assert row[0] == lv.load.label
        assert float(row[2].replace(",", "")) == pytest.approx(lv.throughput_infer_per_s, rel=1e-3)
        assert float(row[7]) == pytest.approx(lv.service.p99_us / 1000, rel=1e-3)
    pct = _table(profile_page, "percentiles-service")
    assert len(pct) == len(conc.levels) + 1
    quality = _table(profile_page, "quality")
    assert [r[1] for r in quality[1:]] == ["yes" if lv.stable else "NO" for lv in conc.levels]
    assert "HTTP 503: request queue full ×7" in quality[-1]


def test_profile_report_embeds_every_input_number(profile_page, conc):
    m = re.search(r'<script type="application/json" id="perfkit-data">(.*?)</script>', profile_page, flags=re.S)
    assert m
    assert json.loads(m.group(1)) == {"runs": [to_dict(conc)]}


def test_open_loop_report_shows_corrected_latency_and_problems(tmp_path):
    rate = RunRecord.load(RECORDS / "profile_rate.json")
    page = _text(write_profile_report([rate], tmp_path / "rate.html"))
    assert 'data-figure="cdf-corrected"' in page and 'data-figure="cdf-service"' in page
    text = _visible(page)
    assert "not stable within the requested precision: 2000 req/s poisson" in text
    assert f"{sum(lv.dropped_count for lv in rate.levels):,} sends dropped" in text
    assert "p50 corrected" in page  # legend text stays text in the SVG


def test_several_runs_in_one_profile_report(tmp_path, conc):
    rate = RunRecord.load(RECORDS / "profile_rate.json")
    page = _text(write_profile_report([conc, rate], tmp_path / "two.html"))
    assert '<section id="measured-1">' in page and '<section id="measured-2">' in page
    # Figure ids are unique across the page although each run draws the same figures.
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))


def test_tune_report(tmp_path):
    runs, tunes = load_inputs([RECORDS / "tune"])
    assert len(tunes) == 1 and len(runs) == 2
    path = write_tune_report(tunes[0], tmp_path / "tune.html", runs)
    assert path.stat().st_size < MAX_BYTES
    page = _text(path)
    text = _visible(page)
    assert SENTENCE in text
    rows = _table(page, "trials")
    assert len(rows) == 1 + len(tunes[0].trials)
    failed = next(r for r in rows if r[0] == "4")
    assert failed[2] == "failed" and "CUDA out of memory" in failed[8]
    best = next(r for r in rows if r[0] == "7")
    assert "best" in best[1] and "Pareto" in best[1]
    assert '<span class="add">+dynamic_batching {</span>' in page
    for key in ("trial-throughput", "trial-latency", "pareto", "importances", "throughput-latency"):
        assert f'data-figure="{key}"' in page
    assert "trial 7 (best)" in page and "trial 0 (original)" in page
    assert_self_contained(page)


def test_tune_report_names_a_streaming_budget(tmp_path):
    runs, tunes = load_inputs([RECORDS / "tune"])
    ttft = dataclasses.replace(tunes[0], budget=dataclasses.replace(tunes[0].budget, metric="ttft"))
    text = _visible(_text(write_tune_report(ttft, tmp_path / "tune.html", runs)))
    assert "within the 20 ms TTFT p99 budget" in text
    assert "TTFT p99 ≤ 20 ms" in text
    plain = _visible(_text(write_tune_report(tunes[0], tmp_path / "plain.html", runs)))
    assert "TTFT" not in plain


def test_comparison_report_colours_by_direction(tmp_path):
    base = RunRecord.load(RECORDS / "compare" / "baseline.json")
    worse = RunRecord.load(RECORDS / "compare" / "current_regressed.json")
    # p99 +~20%: within two jobs' default noise on a stored baseline; judged as from one job here
    quiet = GateOptions(job_noise_pct=parse_job_noise(["all:0%"]))
    page = _text(write_comparison_report([base], [worse], tmp_path / "cmp.html", options=quiet))
    rows = _table(page, "deltas")
    thr = next(r for r in rows if r[0] == "concurrency 8" and r[1].startswith("throughput"))
    assert thr[6] == "regression" and thr[4].startswith("-")
    p99 = next(r for r in rows if r[0] == "concurrency 8" and r[1].startswith("p99"))
    assert p99[6] == "regression" and not p99[4].startswith("-")  # latency up is worse
    assert re.search(r'<td class="[^"]*\bbad\b[^"]*">regression</td>', page)
    # The last level's p99 moved less than its threshold: not a regression.
    last = next(r for r in rows if r[0] == "concurrency 32" and r[1].startswith("p99"))
    assert last[6] == "pass"
    assert "are regressions" in _visible(page)
    assert_self_contained(page)


def test_empty_inputs_are_input_errors(tmp_path):
    with pytest.raises(InputError):
        write_profile_report([], tmp_path / "x.html")
    with pytest.raises(InputError):
        write_comparison_report([], [], tmp_path / "x.html")
    with pytest.raises(InputError):
        load_inputs([])


def test_load_inputs_reads_tune_json_files_and_rejects_others(tmp_path):
    runs, tunes = load_inputs([RECORDS / "tune" / "tune.json", RECORDS / "profile_rate.json"])
    assert len(tunes) == 1 and len(runs) == 3
    other = tmp_path / "other.json"
    other.write_text('{"schema": "something.else"}')
    with pytest.raises(InputError, match="neither a perfkit run record nor a tune record"):
        load_inputs([other])
    broken = tmp_path / "tune"
    broken.mkdir()
    (broken / "tune.json").write_text('{"schema": "perfkit.tune", "schema_version": 1}')
    with pytest.raises(InputError, match="malformed tune record"):
        load_inputs([broken])


# --- the CLI ---------------------------------------------------------------------------------


def _cli(capsys, *args: str) -> tuple[int, str]:
    rc = main(["report", *args])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    ("inputs", "kind"),
    [
        (["profile_concurrency.json"], "profile"),
        (["compare/baseline.json", "compare/current.json"], "comparison"),  # same model, other configs
        (["compare/baseline.json", "compare/current_regressed.json"], "profile"),  # same config: a profile
        (["tune"], "tune"),
    ],
)
def test_cli_picks_the_report(tmp_path, capsys, inputs, kind):
    out = tmp_path / "r.html"
    rc, err = _cli(capsys, *(str(RECORDS / i) for i in inputs), "-o", str(out))
    assert rc == 0, err
    assert f"wrote {kind} report {out}" in err
    assert f"perfkit {kind} report" in out.read_text()


def test_cli_compare_flag(tmp_path, capsys):
    out = tmp_path / "c.html"
    rc, err = _cli(
        capsys,
        "--compare",
        str(RECORDS / "compare/baseline.json"),
        str(RECORDS / "compare/current_regressed.json"),
        "-o",
        str(out),
    )
    assert rc == 0 and "wrote comparison report" in err
    assert "0.2.0.dev0" in _visible(out.read_text())


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.json", "does not exist"),
        (lambda d: d, "is a folder without tune.json"),
        (lambda d: (d / "bad.json").write_text("{nope") and d / "bad.json", "is not readable JSON"),
    ],
)
def test_cli_bad_input_exits_3_with_one_line(tmp_path, capsys, make, message):
    rc, err = _cli(capsys, str(make(tmp_path)), "-o", str(tmp_path / "x.html"))
    assert rc == 3
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfkit: error:") and message in lines[0]
    assert not (tmp_path / "x.html").exists()


def test_cli_compare_needs_two_inputs(tmp_path, capsys):
    rc, err = _cli(capsys, "--compare", str(RECORDS / "profile_rate.json"), "-o", str(tmp_path / "x.html"))
    assert rc == 2 and "--compare needs" in err


def test_cli_does_not_modify_fixtures(tmp_path, capsys):
    copy = tmp_path / "tune"
    shutil.copytree(RECORDS / "tune", copy)
    before = {p.name: p.read_bytes() for p in copy.rglob("*.json")}
    rc, _ = _cli(capsys, str(copy), "-o", str(tmp_path / "t.html"))
    assert rc == 0
    assert {p.name: p.read_bytes() for p in copy.rglob("*.json")} == before


def test_report_from_a_real_profile_record(tmp_path, capsys):
    """fixtures/records/real/ holds a record made by `perfkit profile` against the bundled server."""
    real = RECORDS / "real" / "batcher_concurrency.json"
    rec = RunRecord.load(real)
    out = tmp_path / "real.html"
    rc, err = _cli(capsys, str(real), "-o", str(out))
    assert rc == 0, err
    page = out.read_text()
    rows = _table(page, "levels")
    assert [r[0] for r in rows[1:]] == [lv.load.label for lv in rec.levels]
    text = _visible(page)
    assert f"Triton {rec.server.version}" in text and "mode local" in text
    assert 'data-figure="server-breakdown"' in page
    assert_self_contained(page)
