"""The getting-started page runs: every command of its `bash` blocks, in order, against the bundled server.

The commands are read from docs/getting-started.md itself, so the page cannot rot: a renamed
flag, a changed default path or a command that stopped working fails this test. A block preceded
by ``<!-- docs-test: skip (reason) -->`` is not run (the install block: this test runs in the
environment it makes). The commands run in a scratch folder that holds the checkout's fixtures
(read only, through a link), with this environment's ``perfkit`` first on PATH.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.errors import ExitCode
from perfkit.records import RunRecord, TuneRecord

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "getting-started.md"
SKIP = re.compile(r"<!-- docs-test: skip \((.+?)\) -->\s*$")
# a gate's verdict on two runs of an unchanged model is the machine's noise, not the page's: a
# regression or an inconclusive verdict still means the command ran as written
GATE_VERDICTS = {ExitCode.OK, ExitCode.GATE_REGRESSION, ExitCode.GATE_INCONCLUSIVE}


def page_commands(text: str) -> list[str]:
    """The commands of the page's ```bash blocks, in order (continuation lines joined, comments kept)."""
    commands: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```bash":
            skipped = i > 0 and SKIP.match(lines[i - 1].strip()) is not None
            i += 1
            block: list[str] = []
            while lines[i].strip() != "```":
                block.append(lines[i])
                i += 1
            if not skipped:
                joined = "\n".join(block).replace("\\\n", " ")
                commands += [c for c in joined.splitlines() if c.strip() and not c.lstrip().startswith("#")]
        i += 1
    return commands


def test_the_page_extraction_finds_every_step() -> None:
    commands = page_commands(PAGE.read_text())
    verbs = [shlex.split(c, comments=True)[:2] for c in commands]
    assert ["cp", "-r"] in verbs
    for step in ("profile", "report", "tune", "gate"):
        assert ["perfkit", step] in verbs, f"the getting-started page has no `perfkit {step}` command"
    assert not any("pip install" in c for c in commands), "the install block must stay marked skip"


def test_extraction_honours_skip_markers_and_continuations() -> None:
    text = "a\n<!-- docs-test: skip (why) -->\n```bash\nnot run\n```\n```bash\nrun \\\n  this  # note\n# comment\n```\n"
    assert page_commands(text) == ["run    this  # note"]


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_getting_started_command_runs(tmp_path: Path) -> None:
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures", target_is_directory=True)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("GITHUB_STEP_SUMMARY", None)  # the gate would append its summary to the real job's page
    for command in page_commands(PAGE.read_text()):
        done = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        allowed = GATE_VERDICTS if shlex.split(command)[:2] == ["perfkit", "gate"] else {ExitCode.OK}
        assert done.returncode in allowed, f"`{command}` exited {done.returncode}:\n{done.stdout[-3000:]}"

    # what the page says each step leaves behind is there
    assert RunRecord.load(tmp_path / "runs" / "sleeper.json").levels
    assert (tmp_path / "reports" / "sleeper.html").stat().st_size > 10_000
    tune = TuneRecord.load(tmp_path / "runs" / "tune-batcher" / "tune.json")
    assert tune.trials and (tmp_path / "runs" / "tune-batcher" / "trials.csv").exists()
    if tune.best_trial is not None:  # a machine too loaded for any config to hold 20 ms recommends none
        assert (tmp_path / "runs" / "tune-batcher" / "best" / "config.pbtxt").exists()
    assert (tmp_path / "reports" / "tune-batcher.html").exists()
    assert "<testsuite" in (tmp_path / "runs" / "gate.xml").read_text()
    # the tune restored the config it searched, byte for byte, as the page says
    original = (ROOT / "fixtures" / "models" / "batcher" / "config.pbtxt").read_bytes()
    assert (tmp_path / "models" / "batcher" / "config.pbtxt").read_bytes() == original
