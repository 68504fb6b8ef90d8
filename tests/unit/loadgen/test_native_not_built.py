"""The reason given when perfkit's compiled sender does not import: a checkout built under another
Python has a _native for that one only, and Python's own words then name a circular import."""

from __future__ import annotations

from pathlib import Path

from perfkit.loadgen._native_engine import not_built_reason

SUFFIX = ".cpython-312-x86_64-linux-gnu.so"
CIRCULAR = ImportError("cannot import name '_native' from partially initialized module 'perfkit.loadgen'")


def test_a_build_for_another_python_is_named_with_what_to_do(tmp_path: Path):
    (tmp_path / "_native.cpython-311-x86_64-linux-gnu.so").touch()
    why = not_built_reason(CIRCULAR, tmp_path, SUFFIX)
    assert why == (
        f"no _native{SUFFIX} for this Python (found only _native.cpython-311-x86_64-linux-gnu.so): "
        "reinstall perfkit (pip install .) to build it"
    )
    assert "circular" not in why


def test_no_build_at_all(tmp_path: Path):
    assert not_built_reason(CIRCULAR, tmp_path, SUFFIX).startswith(f"no _native{SUFFIX} for this Python: reinstall")


def test_a_build_that_is_there_but_fails_to_load_keeps_the_loaders_words(tmp_path: Path):
    (tmp_path / f"_native{SUFFIX}").touch()
    err = ImportError("libnghttp2.so.14: cannot open shared object file")
    assert not_built_reason(err, tmp_path, SUFFIX) == str(err)
