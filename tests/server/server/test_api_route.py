"""Tuning a server through its API: a candidate config applied by a load with a config override, the
original put back by a load without one, against a real Triton whose repository is read-only."""

from __future__ import annotations

import compileall
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfkit.errors import ExitCode, ModelLoadError, ServerError
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.api_route import ApiConfigRoute, best_config_text, served_config, served_config_text
from perfkit.server.local import LocalServer
from perfkit.server.modelconfig import ModelConfig, applied_differences, config_to_dict, parse_config

ROOT = Path(__file__).resolve().parents[3]


def _snapshot(repo: Path) -> dict[str, tuple[bytes, int, int]]:
    return {
        str(p.relative_to(repo)): (p.read_bytes(), p.stat().st_mtime_ns, stat.S_IMODE(p.stat().st_mode))
        for p in sorted(repo.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def readonly_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, tuple[bytes, int, int]]]]:
    repo = tmp_path_factory.mktemp("api_route") / "models"
    shutil.copytree(
        ROOT / "fixtures" / "models" / "identity", repo / "identity", ignore=shutil.ignore_patterns("__pycache__")
    )
    # the python backend's stub writes model.py's bytecode beside it when none is there (and tests may run as
    # root, whom chmod does not stop): compiled beforehand, so any write to the repository shows
    compileall.compile_dir(str(repo), quiet=1)
    for p in sorted(repo.rglob("*"), reverse=True):  # files first, then their folders
        os.chmod(p, stat.S_IMODE(p.stat().st_mode) & ~0o222)
    os.chmod(repo, 0o555)
    yield repo, _snapshot(repo)
    for p in (repo, *repo.rglob("*")):
        os.chmod(p, 0o755)


@pytest.fixture(scope="module")
def server(readonly_repo: tuple[Path, dict[str, tuple[bytes, int, int]]]) -> Iterator[LocalServer]:
    repo, _ = readonly_repo
    with launch_local(LocalLaunch(repo, models=("identity",))) as s:
        yield s


def _candidate(original: ModelConfig) -> ModelConfig:
    cand = ModelConfig()
    cand.CopyFrom(original)
    cand.instance_group[0].count = 2
    cand.dynamic_batching.max_queue_delay_microseconds = 200
    return cand


def _serves_original(server: LocalServer, original: ModelConfig) -> bool:
    now = served_config(server, "identity")
    return not applied_differences(original, now) and not now.HasField("dynamic_batching")


@pytest.mark.usefixtures("tritonserver")
def test_a_candidate_is_applied_and_the_original_put_back(
    server: LocalServer, readonly_repo: tuple[Path, dict[str, tuple[bytes, int, int]]]
) -> None:
    repo, before = readonly_repo
    with ApiConfigRoute(server, "identity") as route:
        original = route.original
        assert original.instance_group[0].count == 1 and not original.HasField("dynamic_batching")
        applied = route.apply(_candidate(original))
        assert applied.instance_group[0].count == 2
        assert applied.dynamic_batching.max_queue_delay_microseconds == 200
        # what the server runs now, read back
        assert served_config(server, "identity").instance_group[0].count == 2
    assert route.restore_error is None
    assert _serves_original(server, original)
    assert _snapshot(repo) == before, "the repository's files changed (bytes, mtime or mode)"


@pytest.mark.usefixtures("tritonserver")
def test_an_interrupted_or_failed_trial_puts_the_original_back(
    server: LocalServer, readonly_repo: tuple[Path, dict[str, tuple[bytes, int, int]]]
) -> None:
    repo, before = readonly_repo
    with pytest.raises(KeyboardInterrupt), ApiConfigRoute(server, "identity") as route:
        original = route.original
        route.apply(_candidate(original))
        raise KeyboardInterrupt  # Ctrl-C mid-trial
    assert _serves_original(server, original)
    bad = _candidate(original)
    bad.backend = "no_such_backend"
    with pytest.raises(ModelLoadError), ApiConfigRoute(server, "identity") as route:
        route.apply(bad)
    assert route.restore_error is None
    assert _serves_original(server, original)
    assert server.model_stats("identity")  # loaded and answering
    assert _snapshot(repo) == before


@pytest.mark.usefixtures("tritonserver")
def test_served_config_renders_back_to_pbtxt(
    server: LocalServer, readonly_repo: tuple[Path, dict[str, tuple[bytes, int, int]]]
) -> None:
    repo, _ = readonly_repo
    served = served_config(server, "identity")
    assert parse_config(served_config_text(server, "identity")) == served
    cand = _candidate(served)
    text, source = best_config_text(cand, repo / "identity" / "config.pbtxt")
    assert source == "repository" and text.startswith("# Tiny identity fixture")  # the file's own text, edited
    assert parse_config(text) == cand
    text, source = best_config_text(cand, repo / "identity" / "no-such-config.pbtxt")
    assert source == "served" and parse_config(text) == cand


@pytest.mark.usefixtures("tritonserver")
def test_refused_where_the_server_does_not_let_clients_load(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    shutil.copytree(ROOT / "fixtures" / "models" / "identity", repo / "identity")
    with launch_local(LocalLaunch(repo, models=(), extra_args=("--model-control-mode=none",))) as server:
        with pytest.raises(ServerError) as info, ApiConfigRoute(server, "identity"):
            pass
        assert info.value.exit_code == ExitCode.SERVER
        assert "does not let clients load models" in info.value.one_line()
        assert "\n" not in info.value.one_line()


@pytest.mark.usefixtures("tritonserver")
def test_an_override_served_on_entry_is_what_is_put_back(
    server: LocalServer, readonly_repo: tuple[Path, dict[str, tuple[bytes, int, int]]]
) -> None:
    """Someone had loaded the model with an override before: that config, not the repository's, is restored."""
    repo, before = readonly_repo
    theirs = served_config(server, "identity")
    theirs.max_batch_size = 4
    server.load_model("identity", config=config_to_dict(theirs))
    try:
        with ApiConfigRoute(server, "identity") as route:
            assert route.original.max_batch_size == 4
            route.apply(_candidate(route.original))
        assert route.restore_error is None
        now = served_config(server, "identity")
        assert now.max_batch_size == 4 and now.instance_group[0].count == 1 and not now.HasField("dynamic_batching")
    finally:
        server.unload_model("identity")
        server.load_model("identity")
    assert served_config(server, "identity").max_batch_size == 8
    assert _snapshot(repo) == before
