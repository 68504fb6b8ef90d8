"""Reports open in a real headless Chromium: no console errors, no network request, a non-blank page.

Talks to Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe: fd 3 in,
fd 4 out, NUL-separated JSON), so no extra client package is needed.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib import image as mpimg

from perfkit.records import RunRecord
from perfkit.report import load_inputs, write_comparison_report, write_profile_report, write_tune_report
from tests.conftest import require

RECORDS = Path(__file__).resolve().parents[3] / "fixtures" / "records"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ALLOWED_SCHEMES = ("file:", "data:", "about:", "blob:")

CHROMIUM_HOW = "scripts/system-deps.sh installs it as root: apt-get install chromium"


@pytest.fixture(autouse=True)
def _chromium() -> None:
    require("chromium", CHROMIUM, CHROMIUM_HOW)  # under CI=true a missing browser fails, not skips


class BrowserDied(RuntimeError):
    """Chromium exited before answering (a browser process crash, not something the page did)."""


class Browser:
    """A headless Chromium driven over --remote-debugging-pipe (the smallest possible CDP client)."""

    def __init__(self, profile_dir: Path) -> None:
        to_child_r, self._to_child_w = os.pipe()
        self._from_child_r, from_child_w = os.pipe()

        def place_fds() -> None:
            # The protocol pipes must be fds 3 and 4 in the child: move them clear of 3/4 first.
            a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        assert CHROMIUM is not None
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-default-apps",
                "--disable-extensions",
                "--no-first-run",
                "--hide-scrollbars",
                f"--user-data-dir={profile_dir}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=place_fds,  # noqa: PLW1509 - single-threaded test process
            close_fds=False,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self._from_child_r, 1 << 20)
            if not chunk:
                err = self.proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]  # stderr is a pipe (Popen stderr=PIPE)
                raise BrowserDied(f"chromium closed the pipe (exit {self.proc.wait()}): {err}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)  # type: ignore[no-any-return]  # DevTools protocol replies are JSON objects

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + 60
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})  # type: ignore[no-any-return]  # DevTools protocol replies are JSON objects
            self.events.append(reply)

    def wait_for(self, method: str, timeout_s: float = 30) -> dict[str, Any]:
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        deadline = time.monotonic() + timeout_s
        while True:
            ev = self._read_message(deadline)
            self.events.append(ev)
            if ev.get("method") == method:
                return ev

    def drain(self, quiet_s: float) -> None:
        """Collect events for quiet_s more seconds (late requests, errors after load)."""
        import select

        end = time.monotonic() + quiet_s
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self._from_child_r], [], [], left)
            if not ready:
                break
            chunk = os.read(self._from_child_r, 1 << 20)
            if not chunk:
                break
            self._buf += chunk
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                self.events.append(json.loads(raw))

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child_w)
        os.close(self._from_child_r)


def open_report(path: Path, profile_dir: Path, width: int = 1280, height: int = 2000) -> dict[str, Any]:
    """Load the page; return its console errors, exceptions, requests, screenshot PNG and a DOM probe.

    A browser that dies before answering (seen once in CI on a 2-core machine: the pipe closed with
    no crash report) is started once more with a fresh profile; a second death fails the test.
    """
    try:
        return _open_report_once(path, profile_dir, width, height)
    except BrowserDied:
        return _open_report_once(path, profile_dir.with_name(profile_dir.name + "-again"), width, height)


def _open_report_once(path: Path, profile_dir: Path, width: int, height: int) -> dict[str, Any]:
    browser = Browser(profile_dir)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable", session=session)
        browser.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        browser.events.clear()
        browser.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
        browser.wait_for("Page.loadEventFired")
        browser.drain(1.0)
        probe = browser.send(
            "Runtime.evaluate",
            {
                "expression": "JSON.stringify({svgs: document.querySelectorAll('svg.fig').length,"
                " sections: document.querySelectorAll('section').length,"
                " height: document.documentElement.scrollHeight,"
                " title: document.title,"
                " data: JSON.parse(document.getElementById('perfkit-data').textContent) !== null})",
                "returnByValue": True,
            },
            session=session,
        )
        shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=session)
        events = list(browser.events)
    finally:
        browser.close()
    return {
        "console_errors": [
            e["params"]
            for e in events
            if (e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") in ("error", "assert"))
            or (e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error")
        ],
        "exceptions": [e["params"] for e in events if e.get("method") == "Runtime.exceptionThrown"],
        "requests": [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"],
        "probe": json.loads(probe["result"]["value"]),
        "png": base64.b64decode(shot["data"]),
    }


def _pixel_variety(png: bytes) -> tuple[int, float]:
    img = mpimg.imread(io.BytesIO(png), format="png")[:, :, :3]
    colours = np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    return len(colours), float(img.std())


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("reports")
    runs, tunes = load_inputs([RECORDS / "tune"])
    return {
        "profile": write_profile_report([RunRecord.load(RECORDS / "profile_rate.json")], out / "profile.html"),
        "tune": write_tune_report(tunes[0], out / "tune.html", runs),
        "comparison": write_comparison_report(
            [RunRecord.load(RECORDS / "compare" / "baseline.json")],
            [RunRecord.load(RECORDS / "compare" / "current.json")],
            out / "comparison.html",
        ),
    }


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["profile", "tune", "comparison"])
def test_report_renders_offline_without_errors(reports, kind, tmp_path):
    page = open_report(reports[kind], tmp_path / "chromium-profile")
    assert page["console_errors"] == [] and page["exceptions"] == []
    outside = [u for u in page["requests"] if not u.startswith(ALLOWED_SCHEMES)]
    assert outside == [], f"the page asked the network for {outside}"
    # The page itself was loaded (so request capture works) and nothing else was.
    assert page["requests"] == [reports[kind].resolve().as_uri()]
    probe = page["probe"]
    assert probe["svgs"] >= 2 and probe["sections"] >= 3 and probe["data"]
    assert probe["height"] > 2000  # a real page, not an error stub
    assert f"perfkit {kind} report" not in probe["title"]  # title is the subject, e.g. the model
    (tmp_path / f"{kind}.png").write_bytes(page["png"])
    colours, spread = _pixel_variety(page["png"])
    assert colours > 200 and spread > 0.05, "screenshot looks blank"


@pytest.mark.timeout(120)
def test_the_check_sees_network_requests_and_console_errors(reports, tmp_path):
    """Control: a page that does reach out and log an error is caught (so the checks above can fail)."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        reports["comparison"]
        .read_text()
        .replace(
            "</body>",
            '<img src="http://192.0.2.1/pixel.png"><script>console.error("boom")</script></body>',
        )
    )
    page = open_report(bad, tmp_path / "chromium-profile")
    assert "http://192.0.2.1/pixel.png" in page["requests"]
    assert page["console_errors"]


@pytest.mark.timeout(120)
def test_screenshot_flag_gives_a_non_blank_page(reports, tmp_path):
    """The plain command-line way (--screenshot), as someone would check a report by hand."""
    shot = tmp_path / "out.png"
    assert CHROMIUM is not None
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'ud'}",
            f"--screenshot={shot}",
            "--window-size=1280,2000",
            reports["tune"].resolve().as_uri(),
        ],
        capture_output=True,
        timeout=90,
        check=False,
    )
    assert shot.is_file(), "chromium wrote no screenshot"
    colours, spread = _pixel_variety(shot.read_bytes())
    assert colours > 200 and spread > 0.05, "screenshot looks blank"
