"""`--request-parameter NAME:VALUE:TYPE` on `perfkit profile` (perf_analyzer's flag), read into the spec.

The parameters go in every infer request: gRPC's `ModelInferRequest.parameters` map, as
perf_analyzer's gRPC client sets them (string_param, int64_param, bool_param), and, as perfkit's
own addition, the JSON `parameters` of HTTP infer requests (perf_analyzer 2.60 refuses HTTP; the
`perf_analyzer` command does too, in `_pa_verify`).
"""

from __future__ import annotations

from typing import Any

import click

from perfkit.errors import InputError, UsageError
from perfkit.loadgen import PARAMETER_TYPES, RequestParameters, parameter_values


def request_parameter_option() -> Any:
    """The click option (repeatable)."""
    return click.option(
        "--request-parameter",
        "request_parameters",
        multiple=True,
        metavar="NAME:VALUE:TYPE",
        help="A parameter in every infer request (repeatable): TYPE string, int (int64) or bool (true/false);"
        " gRPC's request parameters, HTTP's JSON `parameters`.",
    )


def read_request_parameters(values: tuple[str, ...]) -> RequestParameters:
    """(name, value, type) per --request-parameter, checked; the last of a repeated name wins. The value
    may hold ':' (NAME is up to the first, TYPE after the last). Raises UsageError naming the value."""
    out: dict[str, tuple[str, str, str]] = {}
    for item in values:
        name, sep, rest = item.partition(":")
        value, sep2, kind = rest.rpartition(":")
        kind = kind.lower()
        if not (sep and sep2 and name):
            raise UsageError(f"--request-parameter {item!r}: expected NAME:VALUE:TYPE")
        if kind not in PARAMETER_TYPES:
            raise UsageError(f"--request-parameter {item!r}: type {kind!r} is not one of {', '.join(PARAMETER_TYPES)}")
        if kind == "bool":
            value = value.lower()
        try:
            parameter_values(((name, value, kind),))
        except InputError:
            what = "an int64" if kind == "int" else "true or false"
            raise UsageError(f"--request-parameter {item!r}: {value!r} is not {what}") from None
        out.pop(name, None)
        out[name] = (name, value, kind)
    return tuple(out.values())
