"""What a newcomer sees first: a clean install (SPDX license string), normalised paths, reports/ by default."""

from __future__ import annotations

import sys
from pathlib import Path

from perfkit.campaign import load_sweep
from perfkit.report import DEFAULT_REPORTS_DIR
from tests.conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_pyproject_license_is_an_spdx_string_setuptools_reads_without_warning():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["license"] == "Apache-2.0"  # a table here is deprecated: setuptools warns for screens
    assert any(r.startswith("setuptools>=77") for r in data["build-system"]["requires"])


def test_sweep_paths_are_normalised():
    sweep = load_sweep(ROOT / "sweeps" / "demo.toml")
    assert ".." not in Path(str(sweep.output_dir)).parts
    assert ".." not in Path(str(sweep.store)).parts
    assert str(sweep.output_dir).endswith(".perfkit/demo")


def test_reports_go_to_the_top_level_reports_folder_with_its_readme():
    assert Path("reports") == DEFAULT_REPORTS_DIR
    readme = (ROOT / "reports" / "README.md").read_text()
    assert "perfkit report" in readme and "perfkit history" in readme
