"""Reading report inputs: run-record JSON files and tune output folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfkit.errors import InputError
from perfkit.records import RUN_SCHEMA, TUNE_SCHEMA, TUNE_SCHEMA_VERSION, RunRecord, TuneRecord, from_dict


def load_tune(path: Path) -> TuneRecord:
    """Read a tune.json (TuneRecord via to_dict); raises InputError naming the file and what is wrong."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"tune record {path} does not exist") from None
    except (OSError, ValueError) as err:
        raise InputError(f"tune record {path} is not readable JSON: {err}") from None
    return tune_from_dict(data, str(path))


def tune_from_dict(data: Any, source: str) -> TuneRecord:
    """Build a TuneRecord from parsed JSON; raises InputError on another schema, version or a malformed record."""
    if not isinstance(data, dict) or data.get("schema") != TUNE_SCHEMA:
        raise InputError(f"{source} is not a perfkit tune record (field 'schema' is not {TUNE_SCHEMA!r})")
    if data.get("schema_version") != TUNE_SCHEMA_VERSION:
        raise InputError(
            f"{source} has schema_version {data.get('schema_version')!r}; this perfkit reads version "
            f"{TUNE_SCHEMA_VERSION}"
        )
    try:
        return from_dict(TuneRecord, data)
    except (TypeError, KeyError, ValueError) as err:
        raise InputError(f"{source} is a malformed tune record: {err}") from None


def _load_file(path: Path) -> RunRecord | TuneRecord:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path} does not exist") from None
    except (OSError, ValueError) as err:
        raise InputError(f"{path} is not readable JSON: {err}") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema == TUNE_SCHEMA:
        return tune_from_dict(data, str(path))
    if schema == RUN_SCHEMA:
        return RunRecord.from_dict(data, source=str(path))
    raise InputError(
        f"{path} is neither a perfkit run record nor a tune record (field 'schema' is {schema!r})",
        hint="give files written by 'perfkit profile -o' or folders written by 'perfkit tune -o'",
    )


def _runs_of(folder: Path) -> list[RunRecord]:
    return [RunRecord.load(p) for p in sorted((folder / "runs").glob("*.json"))]


def load_inputs(paths: list[Path] | list[str] | tuple[Path | str, ...]) -> tuple[list[RunRecord], list[TuneRecord]]:
    """Read run-record files and tune folders (tune.json + optional runs/*.json), in the order given.

    Returns (runs, tunes); a tune folder's runs are included in runs. A tune.json given as a file
    brings its sibling runs/ too. Raises InputError for a missing path, a folder without tune.json,
    or a file that is not a valid perfkit record.
    """
    runs: list[RunRecord] = []
    tunes: list[TuneRecord] = []
    if not paths:
        raise InputError("no input given", hint="give run-record JSON files or tune output folders")
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            tune_file = path / "tune.json"
            if not tune_file.is_file():
                raise InputError(
                    f"{path} is a folder without tune.json",
                    hint="give a tune output folder ('perfkit tune -o DIR') or run-record JSON files",
                )
            tunes.append(load_tune(tune_file))
            runs.extend(_runs_of(path))
            continue
        loaded = _load_file(path)
        if isinstance(loaded, TuneRecord):
            tunes.append(loaded)
            runs.extend(_runs_of(path.parent))
        else:
            runs.append(loaded)
    return runs, tunes
