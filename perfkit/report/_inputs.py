"""Reading report inputs: run-record JSON files and tune output folders."""

from __future__ import annotations

from pathlib import Path

from perfkit.errors import InputError
from perfkit.records import RunRecord, TuneRecord, load_record


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
            tunes.append(TuneRecord.load(tune_file))
            runs.extend(_runs_of(path))
            continue
        loaded = load_record(path)
        if isinstance(loaded, TuneRecord):
            tunes.append(loaded)
            runs.extend(_runs_of(path.parent))
        else:
            runs.append(loaded)
    return runs, tunes
