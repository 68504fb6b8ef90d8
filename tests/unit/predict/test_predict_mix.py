"""The traffic mix's joint simulation (perfkit.predict._mix): models with known service models at
known weights, on a device they share or not; the joint rate each model's own budget allows; and
the contention between models fitted back from a level's stretches."""

from __future__ import annotations

import dataclasses

import pytest

from perfkit.errors import UsageError
from perfkit.predict import (
    BatcherConfig,
    Contention,
    MixMember,
    ServiceModel,
    fit_mix_contention,
    mix_rate,
    shared_device,
    simulate_mix,
    sustainable_rate,
)
from perfkit.predict._mix import MIX_REQUESTS, mix_ceiling_rps

# `light`: 1 ms + 0.5 ms an item; `heavy`: 20 ms + 0.5 ms an item (batching pays); weights 3:1.
LIGHT = MixMember("light", BatcherConfig(), ServiceModel(1_000, 500), 3, 0.0, 20_000)
HEAVY = MixMember("heavy", BatcherConfig(8, True, (), 2_000), ServiceModel(20_000, 500), 1, 0.0, 100_000)


def _shared(*members: MixMember, f: float = 1.0) -> list[MixMember]:
    return [dataclasses.replace(m, device_fraction=f) for m in members]


def test_models_on_devices_of_their_own_hold_what_each_holds_alone_at_its_share():
    joint = mix_rate([LIGHT, HEAVY]).rate_rps
    # alone over as many requests as each has in the mix (MIX_REQUESTS at its share): the same tail
    alone = [
        sustainable_rate(m.config, m.service, m.budget_us, requests=int(MIX_REQUESTS * share)).rate_rps
        for m, share in ((LIGHT, 0.75), (HEAVY, 0.25))
    ]
    # each model at its share (3/4, 1/4): the mix holds the least of alone / share
    expected = min(alone[0] / 0.75, alone[1] / 0.25)
    assert joint == pytest.approx(expected, rel=0.12)


def test_requests_split_by_weight_and_each_model_is_figured_on_its_own():
    light, heavy = simulate_mix([LIGHT, HEAVY], 200.0)
    assert (light.name, heavy.name) == ("light", "heavy")
    assert light.offered_rps == pytest.approx(150.0, rel=0.1) and heavy.offered_rps == pytest.approx(50.0, rel=0.15)
    assert heavy.mean_batch > 1.0 and light.mean_batch == 1.0  # the heavy one batches, the light one cannot
    assert light.stretch == pytest.approx(1.0) and heavy.stretch == pytest.approx(1.0)  # nothing shared


def test_a_shared_device_stretches_one_model_while_the_other_holds_it_and_lowers_the_joint_rate():
    light, heavy = simulate_mix(_shared(LIGHT, HEAVY), 60.0)
    # a light execution waits behind a heavy one's 20+ ms about a quarter of the time: stretched far
    assert light.stretch > 1.5 and light.stretch > heavy.stretch
    alone = mix_rate([LIGHT, HEAVY]).rate_rps
    together = mix_rate(_shared(LIGHT, HEAVY))
    assert together.rate_rps < 0.8 * alone
    # the light model's own budget (20 ms) is what the shared device breaks first
    light_at, heavy_at = together.members
    assert light_at.latency_us <= LIGHT.budget_us and heavy_at.latency_us <= HEAVY.budget_us
    assert light_at.latency_us / LIGHT.budget_us > heavy_at.latency_us / HEAVY.budget_us
    # looser for the light model: the joint rate rises; the heavy one's budget alone does not move it
    looser = mix_rate(_shared(dataclasses.replace(LIGHT, budget_us=80_000), HEAVY)).rate_rps
    assert looser > 1.2 * together.rate_rps


def test_the_ceiling_counts_the_device_every_model_shares():
    cap = mix_ceiling_rps(_shared(LIGHT, HEAVY))
    # the device's time per request at full batches: 3/4 x 1.5 ms + 1/4 x 24 ms / 8
    assert cap == pytest.approx(1 / (0.75 * 1.5e-3 + 0.25 * 24e-3 / 8), rel=1e-6)
    assert mix_rate(_shared(LIGHT, HEAVY)).rate_rps <= cap * 1.02
    apart = mix_ceiling_rps([LIGHT, HEAVY])
    light_cap = 1e6 / 1_500 * Contention().instance_scaling(1) / 0.75
    assert apart == pytest.approx(min(light_cap, 8 / 24e-3 / 0.25), rel=1e-6)


def test_the_contention_between_models_is_fitted_back_from_how_far_their_executions_stretched():
    truth = _shared(LIGHT, HEAVY, f=0.8)
    stretch = [f.stretch for f in simulate_mix(truth, 60.0)]
    assert stretch[0] > 1.2  # the light model waited on the heavy one's device holds
    g = fit_mix_contention([LIGHT, HEAVY], 60.0, stretch)
    assert g == pytest.approx(0.8, abs=0.1)
    # the fitted figure predicts the joint rate the truth holds
    refit = shared_device([LIGHT, HEAVY], g, (1.0, 1.0))
    assert [m.device_fraction for m in refit] == [g, g] and {m.device for m in refit} == {0}
    assert mix_rate(refit).rate_rps == pytest.approx(mix_rate(truth).rate_rps, rel=0.15)
    # each model's own instances' shared fraction, where measured, scales its part
    scaled = shared_device(
        [LIGHT, HEAVY], fit_mix_contention([LIGHT, HEAVY], 60.0, stretch, own=(0.5, 1.0)), (0.5, 1.0)
    )
    assert scaled[0].device_fraction == pytest.approx(scaled[1].device_fraction / 2)
    # no stretch: no device shared; each model on its own, with its own instances' contention
    assert fit_mix_contention([LIGHT, HEAVY], 60.0, [1.0, 1.01]) == 0.0
    apart = shared_device([LIGHT, HEAVY], 0.0, (0.3, 0.9))
    assert [(m.device, m.device_fraction) for m in apart] == [(0, 0.3), (1, 0.9)]


def test_models_on_devices_of_their_own_do_not_wait_on_each_other():
    apart = [
        dataclasses.replace(LIGHT, device_fraction=1.0, device=0),
        dataclasses.replace(HEAVY, device_fraction=1.0, device=1),
    ]
    light, heavy = simulate_mix(apart, 60.0)
    assert light.stretch == pytest.approx(1.0) and heavy.stretch == pytest.approx(1.0)
    # each device's own instances still take turns: the ceiling is each model's own
    assert mix_ceiling_rps(apart) == pytest.approx(mix_ceiling_rps([LIGHT, HEAVY]), rel=1e-6)
    assert mix_rate(apart).rate_rps > 1.2 * mix_rate(_shared(LIGHT, HEAVY)).rate_rps


def test_a_member_refuses_what_it_cannot_mean():
    with pytest.raises(UsageError):
        dataclasses.replace(LIGHT, weight=0)
    with pytest.raises(UsageError):
        dataclasses.replace(LIGHT, device_fraction=1.5)
    with pytest.raises(UsageError):
        simulate_mix([LIGHT], 0.0)
