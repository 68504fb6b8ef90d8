"""The bundled python-backend stub under numpy 2 answers with empty output tensors (measured:
binary_data_size 0 for every output, on the 2-core machine and on an H200 machine); the launcher
refuses to start it there with what to do, rather than let a load generator count empty answers."""

from __future__ import annotations

import pytest

from perfkit.errors import ExitCode, ServerStartError
from perfkit.server.local import check_stub_numpy


@pytest.mark.parametrize("version", ["2.0.0", "2.4.6", "2.5.2"])
def test_numpy_2_is_refused_with_what_to_do(version: str):
    with pytest.raises(ServerStartError) as err:
        check_stub_numpy(version)
    assert err.value.exit_code == ExitCode.SERVER
    assert f"empty outputs under numpy {version}" in err.value.one_line()
    assert "numpy<2" in (err.value.hint or "")


@pytest.mark.parametrize("version", ["1.24.0", "1.26.4"])
def test_numpy_1_starts(version: str):
    check_stub_numpy(version)
