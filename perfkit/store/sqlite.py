"""The default store: one SQLite file, the record JSON kept whole plus key columns."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from perfkit.errors import InputError
from perfkit.records import RunRecord
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

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    config_sha256 TEXT NOT NULL,
    server_version TEXT NOT NULL,
    machine TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    created_utc TEXT NOT NULL,
    saved_utc TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_key ON runs (model, config_sha256, server_version, machine, commit_sha);
CREATE TABLE IF NOT EXISTS baselines (
    name TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id),
    saved_utc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('perfkit_store_version', '1');
"""
# Added after version 1 of the store: older files get the column (empty) when opened.
_ADD_BRANCH = "ALTER TABLE runs ADD COLUMN branch TEXT NOT NULL DEFAULT ''"

_COLUMNS = (
    "r.id, b.name, r.model, r.config_sha256, r.server_version, r.machine, r.commit_sha, r.created_utc, r.saved_utc, "
    "r.branch"
)


class SqliteStore(Store):
    """Run records in a SQLite file (created with its folder when missing)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path)
            self._db.executescript(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
            if "branch" not in columns:
                with self._db:
                    self._db.execute(_ADD_BRANCH)
        except sqlite3.DatabaseError as err:
            raise InputError(f"store {self.path} is not a perfkit SQLite store: {err}") from None
        except OSError as err:
            raise InputError(f"store {self.path} cannot be opened: {err}") from None

    def close(self) -> None:
        self._db.close()

    def save(
        self, record: RunRecord, name: str | None = None, *, commit: str | None = None, branch: str | None = None
    ) -> str:
        run_id = record_id(record)
        keys = key_columns(record)
        saved = now_utc()
        with self._db:
            self._db.execute(
                "INSERT OR IGNORE INTO runs (id, model, config_sha256, server_version, machine, commit_sha,"
                " created_utc, saved_utc, record, branch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    keys["model"],
                    keys["served_config_sha256"],
                    keys["server_version"],
                    keys["machine"],
                    git_commit() if commit is None else commit,
                    keys["created_utc"],
                    saved,
                    record.to_json(),
                    git_branch() if branch is None else branch,
                ),
            )
            if name is not None:
                self._db.execute("INSERT OR REPLACE INTO baselines VALUES (?, ?, ?)", (check_name(name), run_id, saved))
        return run_id

    def _rows(self, where: str = "", params: tuple[str, ...] = ()) -> list[StoreEntry]:
        # A run named by several baselines appears once per name; an unnamed run once.
        sql = (
            f"SELECT {_COLUMNS} FROM runs r LEFT JOIN baselines b ON b.run_id = r.id {where} "
            "ORDER BY r.created_utc DESC, r.saved_utc DESC, b.saved_utc DESC"
        )
        return [
            StoreEntry(*row[:9], location=f"{self.path}#{row[0]}", branch=row[9])  # type: ignore[misc]  # the SELECT lists StoreEntry's first nine fields, in order
            for row in self._db.execute(sql, params)
        ]

    def entry(self, ref: str) -> StoreEntry:
        rows = self._rows("WHERE b.name = ?", (ref,)) or self._rows("WHERE r.id = ?", (ref,))
        if not rows:
            rows = self._rows("WHERE r.id LIKE ?", (ref + "%",)) if len(ref) >= 4 else []
            if len({r.id for r in rows}) > 1:
                raise ambiguous_ref(ref, self.path)
        if not rows:
            raise unknown_ref(ref, self.path)
        return rows[0]

    def get(self, ref: str) -> RunRecord:
        entry = self.entry(ref)
        (text,) = self._db.execute("SELECT record FROM runs WHERE id = ?", (entry.id,)).fetchone()
        return RunRecord.from_dict(json.loads(text), source=entry.location)

    def list(self, model: str | None = None) -> list[StoreEntry]:
        return self._rows("WHERE r.model = ?", (model,)) if model is not None else self._rows()
