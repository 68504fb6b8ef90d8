"""Turn a RUN argument (a run-record file, a directory of them, or a store name/id) into a record."""

from __future__ import annotations

import os
from pathlib import Path

from perfkit.errors import InputError, UsageError
from perfkit.gate.compare import GateOptions, GateResult, compare_pair
from perfkit.records import RunRecord
from perfkit.store import DEFAULT_STORE, DirectoryStore, open_store


def default_store_path() -> Path:
    """$PERFKIT_STORE, else .perfkit/results.sqlite in the working directory."""
    return Path(os.environ.get("PERFKIT_STORE") or DEFAULT_STORE)


def resolve_run(
    ref: str, *, role: str, model: str | None = None, store: str | Path | None = None
) -> tuple[RunRecord, str]:
    """The record a RUN argument names, and a label for it.

    RUN is a run-record file; a directory of run records (the newest of `model`, a named
    baseline first); or a baseline name or run id in the store. Raises InputError naming
    the argument and what was looked for.
    """
    path = Path(ref)
    if path.is_file():
        if path.suffix.lower() in (".sqlite", ".sqlite3", ".db"):
            raise InputError(f"--{role} {ref} is a store, not a run", hint=f"pass --store {ref} --{role} NAME")
        return RunRecord.load(path), str(path)
    if path.is_dir():
        directory = DirectoryStore(path)
        entries = directory.list(model)
        if not entries:
            what = f" of model {model!r}" if model else ""
            raise InputError(f"--{role} directory {path} holds no run record{what}")
        models = sorted({e.model for e in entries})
        if model is None and len(models) > 1:
            raise InputError(
                f"--{role} directory {path} holds runs of several models ({', '.join(models)})",
                hint="pass -m MODEL, or name a run-record file",
            )
        entry = directory.latest(model or models[0])
        assert entry is not None
        return RunRecord.load(Path(entry.location)), entry.location
    if ref.endswith((".json", "/")) or os.sep in ref:
        raise InputError(f"--{role} {ref} does not exist", hint="give a run-record file, a directory, or a store name")
    store_path = store or default_store_path()
    if not Path(store_path).exists():
        raise InputError(
            f"--{role} {ref!r} is not a file or directory, and store {store_path} does not exist",
            hint="save a baseline with `perfkit baseline save RUN --name NAME` or pass --store PATH",
        )
    with open_store(store_path) as st:
        entry = st.entry(ref)
        record = st.get(entry.id)
    return record, f"{entry.name or entry.id} ({store_path})"


def stored_gate(
    baseline_ref: str | None,
    current_ref: str | None,
    opts: GateOptions,
    *,
    model: str | None = None,
    store: str | Path | None = None,
) -> tuple[list[GateResult], list[tuple[RunRecord, RunRecord]]]:
    """`perfkit gate --baseline RUN --current RUN`: resolve both runs and compare them (a traffic mix as a
    whole and model by model); returns the results and the (baseline, current) pair.

    Raises UsageError when a run is not given, and as resolve_run and compare_pair do.
    """
    if not (baseline_ref and current_ref):
        raise UsageError("give --baseline RUN and --current RUN (or --ab with two configs)")
    current, c_label = resolve_run(current_ref, role="current", model=model, store=store)
    baseline, b_label = resolve_run(baseline_ref, role="baseline", model=model or str(current.model.name), store=store)
    results = compare_pair(baseline, current, opts, baseline_label=b_label, current_label=c_label)
    return results, [(baseline, current)]
