"""Shared test harness: a real Triton server (bundled tritonserver) over a copy of the fixtures."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfkit.server import LocalLaunch, launch_local
from perfkit.server.local import LocalServer

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_MODELS = ROOT / "fixtures" / "models"


def copy_models(dest: Path, names: list[str] | None = None) -> Path:
    """Copy fixture models (all, or the named ones) into dest/models; returns that folder."""
    repo = dest / "models"
    repo.mkdir(parents=True, exist_ok=True)
    for src in sorted(FIXTURE_MODELS.iterdir()):
        if src.is_dir() and (names is None or src.name in names):
            shutil.copytree(src, repo / src.name, ignore=shutil.ignore_patterns("__pycache__"))
    return repo


@pytest.fixture(scope="session")
def session_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_models(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="session")
def triton(session_repo: Path) -> Iterator[LocalServer]:
    """One real server with every fixture model, shared by the tests that only read from it."""
    with launch_local(LocalLaunch(session_repo)) as server:
        yield server


@pytest.fixture
def model_repo(tmp_path: Path) -> Path:
    """A private, writable copy of all fixture models for a test that changes configs."""
    return copy_models(tmp_path)
