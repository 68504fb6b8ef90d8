"""Engine settings as a knob: the values a user lists for `parameters { key: ... }` entries of the
config (`--parameter KEY=V1,V2`, repeatable; `[tune] parameters`), searched together.

One point of the knob is every listed key's value, written `KEY=VALUE;KEY2=VALUE2` in the user's key
order (records, trials.csv and Optuna's categorical choices carry it as one string). A key the
original config does not set reads `KEY=` and is written by removing the entry, so trial 0 is the
original exactly. A backend reads these at model load (TensorRT-LLM's engine settings, a python
model's own), so each candidate is a reload, like every other knob.
"""

from __future__ import annotations

import itertools
from typing import Any

from perfkit.errors import InputError
from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import Dimension
from perfkit.tuner._space._knob_base import ABSENT, Ctx, ExtractInfo, Knob

P_PARAMETERS = "parameters"
# Points the knob may hold: the product of the lists beyond this is refused, not sampled at random.
MAX_POINTS = 256


def encode(values: dict[str, str]) -> str:
    """{KEY: VALUE} in order -> 'KEY=VALUE;KEY2=VALUE2' (VALUE '' for an entry the config does not set)."""
    return ";".join(f"{k}={v}" for k, v in values.items())


def decode(point: str) -> dict[str, str]:
    """The inverse of encode."""
    out: dict[str, str] = {}
    for part in point.split(";") if point else ():
        key, _, value = part.partition("=")
        out[key] = value
    return out


def _resolve(ctx: Ctx) -> tuple[Dimension | None, str]:
    lists = ctx.space.parameters
    if not lists:
        return None, "not searched: name config.pbtxt parameters and their values with --parameter KEY=V1,V2"
    keys = [k for k, _ in lists]
    points = [encode(dict(zip(keys, combo))) for combo in itertools.product(*(v for _, v in lists))]
    if len(points) > MAX_POINTS:
        raise InputError(
            f"--parameter: {' x '.join(str(len(v)) for _, v in lists)} = {len(points)} combinations of"
            f" {', '.join(keys)}; at most {MAX_POINTS}",
            hint="list fewer values per key",
        )
    orig = ctx.orig.get(P_PARAMETERS)
    if orig is not None and orig not in points:
        points.insert(0, orig)
    why = f"the values asked for of {', '.join(keys)} (and the model's own)"
    if len(points) < 2:
        return None, f"only {points[0]}: {why}"
    return Dimension(P_PARAMETERS, tuple(points)), why


def _extract(cfg: ModelConfig, info: ExtractInfo) -> Any:
    if not info.parameter_keys:
        return ABSENT
    held = cfg.parameters
    return encode({k: held[k].string_value if k in held else "" for k in info.parameter_keys})


def _apply(cfg: ModelConfig, value: Any, space: Any) -> None:
    for key, text in decode(str(value)).items():
        if text == "":
            if key in cfg.parameters:
                del cfg.parameters[key]
        else:
            cfg.parameters[key].string_value = text


KNOBS: tuple[Knob, ...] = (Knob(P_PARAMETERS, _resolve, _extract, _apply),)
