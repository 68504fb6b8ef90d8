"""Whether a reached server runs Triton's rate limiter, told by the probe load, on the real server
started both ways."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.errors import ServerError
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.rate_limit import rate_limiter_on, require_rate_limiter
from tests.conftest import copy_models


@pytest.mark.parametrize("flags", [(), ("--rate-limit=execution_count",)], ids=["off", "execution_count"])
def test_probe_tells_the_mode_and_leaves_the_model_served(
    tmp_path: Path, tritonserver: Path, flags: tuple[str, ...]
) -> None:
    repo = copy_models(tmp_path, ["identity"])
    with launch_local(LocalLaunch(repo, models=("identity",), extra_args=flags)) as server:
        before = server.model_config("identity")
        assert rate_limiter_on(server, "identity") is bool(flags)
        after = server.model_config("identity")
        # the probe's two claiming instances are gone again: the config served before is back
        assert after["instance_group"] == before["instance_group"]
        assert not any("rate_limiter" in g and g["rate_limiter"].get("resources") for g in after["instance_group"])
        if flags:
            require_rate_limiter(server, "identity")
        else:
            with pytest.raises(ServerError, match="--rate-limit off"):
                require_rate_limiter(server, "identity")
