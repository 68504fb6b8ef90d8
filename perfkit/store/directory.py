"""A store that is a directory of plain run-record JSON files (baselines committed to git).

Every file stays a loadable run record: the store's own facts (baseline name, commit,
time saved) sit in an extra top-level "perfkit_store" object that RunRecord.load ignores.
A named baseline is NAME.json; an unnamed run MODEL-ID.json. Files copied in by hand
work too: their file name (without .json) is their name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfkit.errors import InputError
from perfkit.records import RunRecord, to_dict
from perfkit.store.base import (
    Store,
    StoreEntry,
    ambiguous_ref,
    check_name,
    git_branch,
    git_commit,
    key_columns,
    now_utc,
    record_id,
    unknown_ref,
)

META_KEY = "perfkit_store"


class DirectoryStore(Store):
    """Run records as JSON files in one folder (created when missing)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise InputError(f"store {self.path} is not a directory")

    def save(
        self, record: RunRecord, name: str | None = None, *, commit: str | None = None, branch: str | None = None
    ) -> str:
        run_id = record_id(record)
        keys = key_columns(record)
        stem = check_name(name) if name is not None else f"{_safe(keys['model']) or 'run'}-{run_id}"
        data: dict[str, Any] = to_dict(record)
        data[META_KEY] = {
            "id": run_id,
            "name": name,
            "commit": git_commit() if commit is None else commit,
            "branch": git_branch() if branch is None else branch,
            "saved_utc": now_utc(),
        }
        self.path.mkdir(parents=True, exist_ok=True)
        target = self.path / f"{stem}.json"
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(target)
        return run_id

    def _load(self, path: Path) -> tuple[StoreEntry, RunRecord]:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise InputError(f"run record {path} is not readable JSON: {err}") from None
        record = RunRecord.from_dict(data, source=str(path))
        meta = data.get(META_KEY) if isinstance(data.get(META_KEY), dict) else None
        keys = key_columns(record)
        entry = StoreEntry(
            id=str((meta or {}).get("id") or record_id(record)),
            # a file copied in by hand is named by its file name; an unnamed save stays unnamed
            name=meta.get("name") if meta is not None else path.stem,
            model=keys["model"],
            served_config_sha256=keys["served_config_sha256"],
            server_version=keys["server_version"],
            machine=keys["machine"],
            commit=str((meta or {}).get("commit", "")),
            created_utc=record.created_utc,
            saved_utc=str((meta or {}).get("saved_utc", "")),
            location=str(path),
            branch=str((meta or {}).get("branch", "")),
        )
        return entry, record

    def _all(self) -> list[tuple[StoreEntry, RunRecord]]:
        if not self.path.is_dir():
            return []
        out = []
        for path in sorted(self.path.glob("*.json")):
            try:
                out.append(self._load(path))
            except InputError:
                continue  # not a run record (a tune record, a note): not part of the store
        out.sort(key=lambda er: (er[0].created_utc, er[0].saved_utc), reverse=True)
        return out

    def _find(self, ref: str) -> tuple[StoreEntry, RunRecord]:
        direct = self.path / f"{ref}.json"
        if "/" not in ref and direct.is_file():
            return self._load(direct)
        matches = [er for er in self._all() if er[0].id == ref or (len(ref) >= 4 and er[0].id.startswith(ref))]
        if len({er[0].id for er in matches}) > 1:
            raise ambiguous_ref(ref, self.path)
        if not matches:
            raise unknown_ref(ref, self.path)
        return matches[0]

    def entry(self, ref: str) -> StoreEntry:
        return self._find(ref)[0]

    def get(self, ref: str) -> RunRecord:
        return self._find(ref)[1]

    def list(self, model: str | None = None) -> list[StoreEntry]:
        return [e for e, _ in self._all() if model is None or e.model == model]


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text).lstrip(".")
