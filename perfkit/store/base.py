"""What both store backends share: the entry type, the key derivation, the interface."""

from __future__ import annotations

import hashlib
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from perfkit.errors import InputError
from perfkit.records import Machine, RunRecord

DEFAULT_STORE = Path(".perfkit") / "results.sqlite"


@dataclass(frozen=True)
class StoreEntry:
    """One stored run: its id, optional baseline name, the key columns, where it lives."""

    id: str
    name: str | None
    model: str
    served_config_sha256: str  # of the served config's JSON (column config_sha256 in the SQLite store)
    server_version: str
    machine: str
    commit: str
    created_utc: str
    saved_utc: str
    location: str  # file path (directory store) or "PATH.sqlite#id"
    branch: str = ""  # the source branch the run was saved from ("" when unknown)


def record_id(record: RunRecord) -> str:
    """A stable content id for a record: the first 12 hex digits of its JSON's SHA-256."""
    return hashlib.sha256(record.to_json().encode()).hexdigest()[:12]


def machine_key(machine: Machine) -> str:
    """A short, readable key for a machine: hostname plus a hash of its hardware (Machine.identity)."""
    hardware = machine.identity().split(":", 1)[1]
    digest = hashlib.sha256(hardware.encode()).hexdigest()[:8] if hardware else ""
    return f"{machine.hostname}:{digest}" if machine.hostname else digest


def git_commit(cwd: Path | None = None) -> str:
    """`git rev-parse HEAD` in cwd, or "" when not in a repository or git is missing."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


# CI systems check out a detached HEAD: their branch name comes from the environment.
_BRANCH_ENV = ("PERFKIT_BRANCH", "GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BUILDKITE_BRANCH")


def git_branch(cwd: Path | None = None) -> str:
    """The current branch: $PERFKIT_BRANCH or a CI system's variable, else `git rev-parse --abbrev-ref HEAD`
    ("" when detached, not in a repository, or git is missing)."""
    import os  # noqa: PLC0415

    for name in _BRANCH_ENV:
        if os.environ.get(name):
            return os.environ[name]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--abbrev-ref", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    branch = out.stdout.strip() if out.returncode == 0 else ""
    return "" if branch == "HEAD" else branch


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_columns(record: RunRecord) -> dict[str, str]:
    """The key columns of a record (commit excluded: it belongs to the save, not the run)."""
    return {
        "model": str(record.model.name),
        "served_config_sha256": record.model.served_config_sha256,
        "server_version": str(record.server.version),
        "machine": machine_key(record.machine),
        "created_utc": record.created_utc,
    }


def unknown_ref(ref: str, store: object) -> InputError:
    """The error for a name or id no run in the store has (both backends raise it)."""
    return InputError(f"no baseline or run {ref!r} in store {store}", hint="see `perfkit baseline list --store PATH`")


def ambiguous_ref(ref: str, store: object) -> InputError:
    """The error for an id prefix that several runs in the store share (both backends raise it)."""
    return InputError(f"{ref!r} matches several runs in store {store}", hint="give more of the id")


def check_name(name: str) -> str:
    """Baseline names are file-name safe; raises InputError otherwise."""
    ok = name and all(c.isalnum() or c in "-_." for c in name) and not name.startswith(".")
    if not ok:
        raise InputError(f"baseline name {name!r} is not allowed", hint="use letters, digits, '-', '_' and '.'")
    return name


class Store(ABC):
    """A results store. Use as a context manager or call close()."""

    path: Path

    @abstractmethod
    def save(
        self, record: RunRecord, name: str | None = None, *, commit: str | None = None, branch: str | None = None
    ) -> str:
        """Keep a record (and name it a baseline when name is given; a name moves to the newest save).

        Returns the record's id. commit: the source commit to key it by (default: git HEAD of the cwd);
        branch: the source branch (default: git_branch()).
        """

    @abstractmethod
    def entry(self, ref: str) -> StoreEntry:
        """The entry for an id or a baseline name; raises InputError when there is none."""

    @abstractmethod
    def get(self, ref: str) -> RunRecord:
        """The record for an id or a baseline name; raises InputError when there is none."""

    @abstractmethod
    def list(self, model: str | None = None) -> list[StoreEntry]:
        """Entries, newest first, of one model or all."""

    def baselines(self) -> dict[str, StoreEntry]:
        """Named baselines: name -> entry."""
        return {e.name: e for e in self.list() if e.name}

    def latest(self, model: str, *, named_first: bool = True) -> StoreEntry | None:
        """The newest entry of a model (a named baseline first, when named_first and there is one)."""
        entries = self.list(model)
        if named_first:
            named = [e for e in entries if e.name]
            if named:
                return named[0]
        return entries[0] if entries else None

    def close(self) -> None:  # noqa: B027  (a directory store holds nothing open)
        """Release what the store holds open."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
