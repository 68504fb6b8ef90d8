"""The results store: the same behaviour from the SQLite file and the directory of JSON files."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.errors import InputError
from perfkit.gate.synthetic import synthetic_record
from perfkit.records import RunRecord
from perfkit.store import DirectoryStore, SqliteStore, open_store


@pytest.fixture(params=["sqlite", "directory"])
def store_path(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "results.sqlite") if request.param == "sqlite" else str(tmp_path / "baselines") + "/"


def _rec(model: str = "sleeper", created: str = "2025-01-01T00:00:00Z", **kw: object) -> RunRecord:
    return dataclasses.replace(synthetic_record(model=model, **kw), created_utc=created)


def test_open_store_picks_the_backend(store_path: str):
    with open_store(store_path) as st:
        assert isinstance(st, SqliteStore if store_path.endswith(".sqlite") else DirectoryStore)


def test_save_get_roundtrip_by_id_and_name(store_path: str):
    rec = _rec()
    with open_store(store_path) as st:
        run_id = st.save(rec, "main", commit="abc123")
        assert st.get(run_id) == rec
        assert st.get("main") == rec
        assert st.get(run_id[:6]) == rec  # an id prefix works
        entry = st.entry("main")
    assert (entry.id, entry.name, entry.model, entry.commit) == (run_id, "main", "sleeper", "abc123")
    assert entry.served_config_sha256 == rec.model.served_config_sha256
    assert entry.server_version == "2.51.0"
    assert entry.machine.startswith("ci-runner:")


def test_store_persists_across_opens(store_path: str):
    rec = _rec()
    with open_store(store_path) as st:
        run_id = st.save(rec, commit="")
    with open_store(store_path) as st:
        assert st.get(run_id) == rec


def test_list_filters_by_model_newest_first(store_path: str):
    with open_store(store_path) as st:
        old = st.save(_rec(created="2025-01-01T00:00:00Z"), commit="")
        new = st.save(_rec(created="2025-02-01T00:00:00Z", seed=3), commit="")
        other = st.save(_rec(model="batcher"), commit="")
        assert [e.id for e in st.list("sleeper")] == [new, old]
        assert {e.id for e in st.list()} == {old, new, other}
        assert st.list("nope") == []


def test_a_name_moves_to_the_newest_save(store_path: str):
    with open_store(store_path) as st:
        st.save(_rec(seed=1), "main", commit="")
        second = st.save(_rec(seed=2, created="2025-03-01T00:00:00Z"), "main", commit="")
        assert st.entry("main").id == second
        assert list(st.baselines()) == ["main"]
        assert st.latest("sleeper") is not None and st.latest("sleeper").id == second  # type: ignore[union-attr]  # narrowed by the is-not-None check on the same line


def test_unknown_ref_is_a_clear_error(store_path: str):
    with open_store(store_path) as st, pytest.raises(InputError, match="no baseline or run 'nope'"):
        st.get("nope")


def test_bad_names_are_refused(store_path: str):
    with open_store(store_path) as st, pytest.raises(InputError, match="not allowed"):
        st.save(_rec(), "../escape", commit="")


def test_directory_files_stay_plain_run_records(tmp_path: Path):
    rec = _rec()
    with open_store(str(tmp_path / "b") + "/") as st:
        st.save(rec, "main", commit="c0ffee")
    assert RunRecord.load(tmp_path / "b" / "main.json") == rec  # loadable without the store
    assert json.loads((tmp_path / "b" / "main.json").read_text())["perfkit_store"]["commit"] == "c0ffee"


def test_directory_store_takes_hand_copied_records(tmp_path: Path):
    rec = _rec()
    rec.save(tmp_path / "b" / "sleeper-main.json")
    (tmp_path / "b" / "notes.json").write_text('{"not": "a run"}')
    with open_store(tmp_path / "b") as st:
        assert st.get("sleeper-main") == rec
        assert [e.name for e in st.list()] == ["sleeper-main"]


def test_open_store_refuses_other_paths(tmp_path: Path):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(InputError, match="not a SQLite store"):
        open_store(tmp_path / "file.txt")
    with pytest.raises(InputError, match="neither"):
        open_store(tmp_path / "nothing")
    (tmp_path / "junk.sqlite").write_text("this is not sqlite" * 100)
    with pytest.raises(InputError, match="not a perfkit SQLite store"):
        open_store(tmp_path / "junk.sqlite")


def test_baseline_cli_save_show_list(store_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    run = _rec().save(tmp_path / "run.json")
    assert main(["baseline", "save", str(run), "--name", "main", "--store", store_path]) == 0
    assert main(["baseline", "show", "main", "--store", store_path]) == 0
    out = capsys.readouterr().out
    assert "sleeper" in out and "concurrency 1" in out and "main" in out
    assert main(["baseline", "list", "--store", store_path, "-m", "sleeper"]) == 0
    assert "main" in capsys.readouterr().out
    assert main(["baseline", "show", "nope", "--store", store_path]) == 3
