"""Store stage: run records kept and found again, keyed by what makes runs comparable.

Two backends behind one interface (`open_store`): a SQLite file (the default; the
record JSON kept whole next to key columns) and a directory of plain run-record JSON
files, for teams that commit their baselines to git. Keys: model, config hash
(RunRecord.model.served_config_sha256), server version, machine, commit.
"""

from __future__ import annotations

from pathlib import Path

from perfkit.store.base import DEFAULT_STORE, Store, StoreEntry, git_commit, machine_key, record_id
from perfkit.store.directory import DirectoryStore
from perfkit.store.sqlite import SqliteStore

__all__ = [
    "DEFAULT_STORE",
    "DirectoryStore",
    "SqliteStore",
    "Store",
    "StoreEntry",
    "git_commit",
    "machine_key",
    "open_store",
    "record_id",
]

_SQLITE_SUFFIXES = (".sqlite", ".sqlite3", ".db")


def open_store(path: str | Path | None = None) -> Store:
    """Open (creating if needed) the store at path: a SQLite file, or a directory of JSON files.

    A path ending in .sqlite/.sqlite3/.db is a SQLite store; an existing directory, or
    a path written with a trailing slash, is a directory store. None: DEFAULT_STORE.
    Raises InputError when the path is neither.
    """
    from perfkit.errors import InputError  # noqa: PLC0415

    text = str(path) if path is not None else str(DEFAULT_STORE)
    p = Path(text)
    if p.suffix.lower() in _SQLITE_SUFFIXES and not p.is_dir():
        return SqliteStore(p)
    if p.is_dir() or text.endswith(("/", "\\")):
        return DirectoryStore(p)
    if p.exists():
        raise InputError(
            f"store {p} is a file but not a SQLite store",
            hint="name a .sqlite file or a directory (trailing slash to create one)",
        )
    raise InputError(
        f"store {p} is neither a .sqlite file nor a directory",
        hint="use PATH.sqlite for a SQLite store, or DIR/ (trailing slash) for a directory of run records",
    )
