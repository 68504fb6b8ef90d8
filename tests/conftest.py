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


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """A two-node Ray cluster on this machine (one process tree per node), joined by this process.

    Yields the cluster's address. Under CI=true a missing Ray fails the test instead of skipping it.
    """
    import os

    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail('Ray is not installed: pip install -e ".[dev]" (it brings perfkit[distributed])')
        pytest.skip('Ray is not installed (pip install "perfkit[distributed]")')
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray's workers import perfkit: make sure they find this checkout's copy.
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    small = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
    try:
        # the second node alone offers a custom resource, as client hosts would be labelled
        cluster.add_node(**small, resources={"perfkit_client": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster.address
    finally:
        ray.shutdown()
        cluster.shutdown()
        if old_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_path
