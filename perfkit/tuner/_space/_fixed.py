"""A knob held at one value (--fix): the dimension it resolves to, typed as its own values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfkit.errors import InputError
from perfkit.tuner._space._core import Dimension


def fixed_dimension(
    name: str, text: str, dim: Dimension | None, why: str, orig: Mapping[str, Any]
) -> tuple[Dimension | None, str]:
    """A knob held at one value (--fix), as the value its dimension would take, with the original's
    kept beside it (trial 0 is the original). A knob that does not apply stays unsearched."""
    if dim is None:
        return None, why
    sample = dim.low if dim.is_range else dim.choices[0]
    value: Any
    try:
        if isinstance(sample, bool):
            if text.lower() not in ("true", "false", "on", "off", "1", "0"):
                raise ValueError(text)
            value = text.lower() in ("true", "on", "1")
        elif isinstance(sample, float):
            value = float(text)
        elif isinstance(sample, int):
            value = int(text)
        else:
            value = text
    except ValueError:
        raise InputError(f"--fix {name}={text}: not a value of {name}", hint=f"its values: {dim.describe()}") from None
    if not dim.is_range and not isinstance(sample, (int, float)) and value not in dim.choices:
        raise InputError(f"--fix {name}={text}: not a value of {name}", hint=f"its values: {dim.describe()}")
    if name in orig and orig[name] == value:
        return None, f"fixed at the original's {value} (--fix)"
    choices = (orig[name], value) if name in orig else (value,)
    return Dimension(name, choices, when_dynamic_batching=dim.when_dynamic_batching, when_gpu_kind=dim.when_gpu_kind), (
        f"fixed at {value} (--fix)" + (f"; the original's {orig[name]} kept for trial 0" if len(choices) > 1 else "")
    )
