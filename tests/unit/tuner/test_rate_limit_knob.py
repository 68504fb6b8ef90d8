"""The rate limiter knob without a server: where it is searched, what it writes, read back."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from perfkit.errors import UsageError
from perfkit.server.launch import ServerOptions
from perfkit.server.modelconfig import ModelConfig
from perfkit.server.rate_limit import PROBE_RESOURCE, probe_config, rate_limit_args
from perfkit.tuner._space import TuneSpace, apply_params, extract_params, resolve
from perfkit.tuner._space._knob_rate_limit import DEVICE_RESOURCE, P_RATE_LIMIT

HUNGRY = Path(__file__).resolve().parents[3] / "fixtures" / "models" / "hungry"


def _cfg(extra: str = "") -> ModelConfig:
    text = (HUNGRY / "config.pbtxt").read_text()
    if extra:
        text = text.replace("kind: KIND_CPU", "kind: KIND_CPU\n" + extra)
    return text_format.Parse(text, ModelConfig())


def test_searched_only_between_models_served_together() -> None:
    alone = resolve(TuneSpace(), _cfg(), HUNGRY, latency_budget_us=1e5, gpus=0)
    assert alone.dimension(P_RATE_LIMIT) is None and P_RATE_LIMIT not in alone.original_params
    assert "--mix" in alone.reasons[P_RATE_LIMIT]
    mixed = resolve(TuneSpace(shared_with=("batcher",)), _cfg(), HUNGRY, latency_budget_us=1e5, gpus=0)
    dim = mixed.dimension(P_RATE_LIMIT)
    assert dim is not None and dim.choices == (0, 1, 2, 4)
    assert "batcher" in mixed.reasons[P_RATE_LIMIT]
    several = resolve(TuneSpace(shared_with=("batcher",)), _cfg(), HUNGRY, latency_budget_us=1e5, gpus=2)
    assert several.dimension(P_RATE_LIMIT) is None


def test_writes_one_global_claim_with_the_priority_and_reads_it_back() -> None:
    rs = resolve(TuneSpace(shared_with=("batcher",)), _cfg(), HUNGRY, latency_budget_us=1e5, gpus=0)
    assert rs.original_params[P_RATE_LIMIT] == 0  # searched: the original's point is at 0 (no block)
    cfg = apply_params(_cfg(), {P_RATE_LIMIT: 4, "instance_count": 2}, rs)
    rl = cfg.instance_group[0].rate_limiter
    assert rl.priority == 4
    assert [(r.name, r.count, getattr(r, "global")) for r in rl.resources] == [(DEVICE_RESOURCE, 1, True)]
    assert extract_params(cfg, backend="python")[P_RATE_LIMIT] == 4
    off = apply_params(cfg, {P_RATE_LIMIT: 0}, rs)
    assert not off.instance_group[0].HasField("rate_limiter")
    assert P_RATE_LIMIT not in extract_params(off, backend="python")


def test_the_users_own_resources_are_kept_and_not_searched() -> None:
    own = 'rate_limiter { resources [ { name: "R1" count: 3 } ] priority: 2 }'
    rs = resolve(TuneSpace(shared_with=("batcher",)), _cfg(own), HUNGRY, latency_budget_us=1e5, gpus=0)
    assert rs.dimension(P_RATE_LIMIT) is None
    assert "of their own" in rs.reasons[P_RATE_LIMIT]
    assert P_RATE_LIMIT not in rs.original_params
    cfg = apply_params(_cfg(own), {P_RATE_LIMIT: 1}, rs)
    assert cfg.instance_group[0].rate_limiter.resources[0].name == "R1"


def test_server_flags() -> None:
    assert rate_limit_args(ServerOptions()) == []
    on = ServerOptions(rate_limit="execution_count", rate_limit_resources=("R1:4", "R2:2:0"))
    assert rate_limit_args(on) == [
        "--rate-limit=execution_count",
        "--rate-limit-resource=R1:4",
        "--rate-limit-resource=R2:2:0",
    ]
    with pytest.raises(UsageError, match="'always' unknown"):
        rate_limit_args(ServerOptions(rate_limit="always"))


def test_probe_claims_one_resource_both_globally_and_per_device() -> None:
    served = {"name": "m", "instance_group": [{"name": "m_0", "count": 4, "kind": "KIND_CPU"}]}
    probe = probe_config(served)
    groups = probe["instance_group"]
    assert [g["count"] for g in groups] == [1, 1] and all(g["kind"] == "KIND_CPU" for g in groups)
    claims = [g["rate_limiter"]["resources"][0] for g in groups]
    assert {c["name"] for c in claims} == {PROBE_RESOURCE} and [c["global"] for c in claims] == [True, False]
    assert served["instance_group"][0]["count"] == 4  # the served config is not changed
