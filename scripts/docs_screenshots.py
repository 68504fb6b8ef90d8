"""Regenerate the documentation's pictures from real runs against the bundled Triton.

    .venv/bin/python scripts/docs_screenshots.py            # all pictures (a few minutes on a quiet machine)
    .venv/bin/python scripts/docs_screenshots.py --only dashboard

Writes, under docs/images/:

- report-profile.png: the HTML report of a `perfkit profile` run of the `batcher` fixture
  (closed loop, concurrency 1 to 4);
- report-tune.png: the HTML report of a short `perfkit tune` of `batcher` (p99 within 50 ms) (on a copy of the
  fixture models: the checkout is never touched);
- dashboard.png: the panels of dashboards/perfkit-triton.json, laid out on the dashboard's own
  grid, each drawn from its own PromQL queries, which a real Prometheus answered after scraping
  perfkit (--metrics-port) and Triton during the profile run above. Grafana itself is not
  involved (it is not packaged for Debian): the queries, units and layout are the dashboard's.

Every picture is taken by the test suite's headless Chromium harness (tests/unit/report/test_report_browser.py:
Chromium over the DevTools protocol on a pipe). Needs Chromium and Prometheus
(scripts/system-deps.sh installs both).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
from matplotlib import image as mpimg  # noqa: E402
from matplotlib import pyplot as plt  # noqa: E402

from perfkit.report import load_inputs, write_profile_report, write_tune_report  # noqa: E402
from perfkit.server._ports import free_ports  # noqa: E402
from tests.conftest import PrometheusServer  # noqa: E402
from tests.test_report_browser import open_report  # noqa: E402

IMAGES = ROOT / "docs" / "images"
DASHBOARD = ROOT / "dashboards" / "perfkit-triton.json"
PERFKIT = [sys.executable, "-m", "perfkit"]
MODEL = "batcher"


def _run(cmd: list[str], cwd: Path) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, check=True)


def _crop_png(png: bytes, height: int) -> bytes:
    """The top `height` pixels of a screenshot (a page's first screen)."""
    img = mpimg.imread(io.BytesIO(png), format="png")
    out = io.BytesIO()
    plt.imsave(out, img[:height], format="png")
    return out.getvalue()


def profile_with_prometheus(work: Path) -> tuple[Path, PrometheusServer, float, float]:
    """One real profile run scraped by a real Prometheus; returns the record, Prometheus and the run's span."""
    metrics_port, triton_metrics_port = free_ports(2)
    prom = PrometheusServer(work / "prometheus", [f"127.0.0.1:{metrics_port}", f"127.0.0.1:{triton_metrics_port}"])
    record = work / "runs" / "batcher.json"
    start = time.time()
    _run(
        [
            *PERFKIT, "profile", "-m", MODEL, "--model-repository", str(ROOT / "fixtures" / "models"),
            "--concurrency-range", "1:4:1", "-p", "1000", "-r", "10", "-o", str(record),
            "--metrics-port", str(metrics_port), "--server-metrics-port", str(triton_metrics_port),
            "--metrics-linger", "3",
        ],
        work,
    )  # fmt: skip
    return record, prom, start, time.time()


def _query_range(prom: PrometheusServer, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1"}
    url = f"http://127.0.0.1:{prom.port}/api/v1/query_range?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=20) as resp:
        body = json.loads(resp.read())
    if body["status"] != "success":
        raise RuntimeError(f"{expr}: {body}")
    return list(body["data"]["result"])


_UNIT_SCALE = {"s": (1e3, "ms"), "percentunit": (100.0, "%"), "reqps": (1.0, "req/s"), "short": (1.0, "")}


def _panel_svg(panel: dict[str, Any], prom: PrometheusServer, start: float, end: float, w: int, h: int) -> str:
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    scale, label = _UNIT_SCALE.get(unit, (1.0, unit))
    fig, ax = plt.subplots(figsize=(w / 100, h / 100), dpi=100)
    fig.patch.set_facecolor("#181b1f")
    ax.set_facecolor("#181b1f")
    drew = False
    for target in panel.get("targets", []):
        expr = target["expr"].replace("$model", MODEL).replace("$__rate_interval", "4s")
        for series in _query_range(prom, expr, start, end):
            xs = [float(t) - start for t, _ in series["values"]]
            ys = [float(v) * scale for _, v in series["values"]]
            legend = target.get("legendFormat", "")
            for k, v in series["metric"].items():
                legend = legend.replace("{{" + k + "}}", v)
            legend = re.sub(r"\s*\{\{\w+\}\}", "", legend).replace("concurrency ", "c")
            ax.plot(xs, ys, linewidth=1.4, label=legend or None)
            drew = True
    ax.set_title(panel["title"], color="#d8d9da", fontsize=10, loc="left")
    ax.tick_params(colors="#8e8e8e", labelsize=8)
    for side in ax.spines.values():
        side.set_color("#2c3235")
    ax.grid(color="#2c3235", linewidth=0.6)
    ax.set_xlabel("seconds into the run", color="#8e8e8e", fontsize=8)
    if label:
        ax.set_ylabel(label, color="#8e8e8e", fontsize=8)
    if drew:
        handles, labels = ax.get_legend_handles_labels()
        if any(labels):
            ax.legend(
                fontsize=7,
                facecolor="#181b1f",
                edgecolor="#2c3235",
                labelcolor="#d8d9da",
                loc="upper left",
                bbox_to_anchor=(1.01, 1.0),
                ncol=2 if len(labels) > 8 else 1,
            )
    else:
        ax.text(0.5, 0.5, "no data (no GPU on this server)", color="#8e8e8e", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg", facecolor=fig.get_facecolor())
    plt.close(fig)
    svg = out.getvalue()
    return svg[svg.index("<svg") :]


def dashboard_page(prom: PrometheusServer, start: float, end: float, page: Path) -> Path:
    """The dashboard's panels on its own 24-column grid, as one offline HTML page."""
    dash = json.loads(DASHBOARD.read_text())
    col_px, row_px = 1400 / 24, 30
    parts = []
    for panel in dash["panels"]:
        g = panel["gridPos"]
        x, y, w, h = g["x"] * col_px, g["y"] * row_px, g["w"] * col_px, g["h"] * row_px
        style = f"left:{x:.0f}px;top:{y + 40:.0f}px;width:{w - 8:.0f}px;height:{h - 8:.0f}px"
        if panel["type"] == "row":
            parts.append(f'<div class="row" style="{style}">{panel["title"]}</div>')
        else:
            svg = _panel_svg(panel, prom, start, end, int(w - 8), int(h - 8))
            parts.append(f'<div class="panel" style="{style}">{svg}</div>')
    height = 40 + max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dash["panels"]) * row_px
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>"
        + dash["title"]
        + "</title><style>body{margin:0;background:#111217;font-family:sans-serif}"
        ".bar{position:absolute;left:0;top:0;height:32px;width:1400px;color:#d8d9da;padding:6px 10px;"
        "font-size:15px;border-bottom:1px solid #2c3235}"
        ".panel{position:absolute;background:#181b1f;border:1px solid #2c3235;border-radius:2px;overflow:hidden}"
        ".panel svg{width:100%;height:100%}.row{position:absolute;color:#d8d9da;font-size:14px;font-weight:bold}"
        f"</style></head><body style='height:{height}px'><div class='bar'>{dash['title']} &nbsp;·&nbsp; model = "
        f"{MODEL} &nbsp;·&nbsp; each panel drawn from its own PromQL queries</div>"
        + "".join(parts)
        + "<script type='application/json' id='perfkit-data'>{}</script></body></html>"
    )
    return page


def tune_record(work: Path) -> Path:
    """A short real tune of the batcher fixture, on a copy of the fixture models."""
    models = work / "models"
    shutil.copytree(ROOT / "fixtures" / "models", models)
    out = work / "tune-batcher"
    _run(
        [
            *PERFKIT, "tune", "-m", MODEL, "--model-repository", str(models), "--latency-budget", "50ms",
            "--trials", "8", "--max-batch-sizes", "4,8,16", "--instance-counts", "1,2", "--confirm", "2",
            "--max-time", "6m", "--seed", "0", "-o", str(out),
        ],
        work,
    )  # fmt: skip
    return out


def shoot(page: Path, name: str, work: Path, width: int, height: int, crop: int | None = None) -> None:
    shot = open_report(page, work / f"chromium-{name}", width=width, height=height)
    if shot["console_errors"] or shot["exceptions"]:
        raise RuntimeError(f"{page}: {shot['console_errors'] or shot['exceptions']}")
    png = _crop_png(shot["png"], crop) if crop else shot["png"]
    (IMAGES / f"{name}.png").write_bytes(png)
    print(f"wrote docs/images/{name}.png", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["report-profile", "report-tune", "dashboard"], action="append")
    args = parser.parse_args()
    wanted = set(args.only or ["report-profile", "report-tune", "dashboard"])
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="perfkit-docs-") as tmp:
        work = Path(tmp)
        if wanted & {"report-profile", "dashboard"}:
            record, prom, start, end = profile_with_prometheus(work)
            try:
                if "dashboard" in wanted:
                    time.sleep(2)  # the last scrape of the lingering exporter lands
                    page = dashboard_page(prom, start, end, work / "dashboard.html")
                    shoot(page, "dashboard", work, 1400, 1320)
            finally:
                prom.stop()
            if "report-profile" in wanted:
                runs, _ = load_inputs([record])
                page = write_profile_report(runs, work / "profile.html")
                shoot(page, "report-profile", work, 1280, 2200, crop=1500)
        if "report-tune" in wanted:
            runs, tunes = load_inputs([tune_record(work)])
            page = write_tune_report(tunes[0], work / "tune.html", runs)
            shoot(page, "report-tune", work, 1280, 2200, crop=1500)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
