"""`--request-parameter NAME:VALUE:TYPE` on `perfkit profile` (perf_analyzer's flag), read into the spec.

The parameters go in every infer request: gRPC's `ModelInferRequest.parameters` map, as
perf_analyzer's gRPC client sets them (string_param, int64_param, bool_param), and, as perfkit's
own addition, the JSON `parameters` of HTTP infer requests (perf_analyzer 2.60 refuses HTTP; the
`perf_analyzer` command does too, in `_pa_verify`).

`--request-priority` and `--request-timeout-us` set the two parameters Triton reserves for admission
control (server docs/protocol/extension_parameters.md: "priority" and "timeout", int64): the
request's priority level (read by the dynamic batcher when the model has priority_levels) and its
queue timeout in microseconds (used when the model's queue policy has allow_timeout_override, and
only to shorten its default_timeout_microseconds: core src/scheduler_utils.cc PolicyQueue::Enqueue
takes it only when it is non-zero and below the default, so with no default timeout it does nothing).
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


def admission_options() -> list[Any]:
    """The click options of the two admission-control parameters."""
    return [
        click.option(
            "--request-priority",
            type=click.IntRange(min=0),
            default=None,
            help="Every request's priority level (Triton's `priority` request parameter; 1 is the highest, 0 the"
            " model's default_priority_level).",
        ),
        click.option(
            "--request-timeout-us",
            type=click.IntRange(min=0),
            default=None,
            help="Every request's queue timeout in microseconds (Triton's `timeout` request parameter: it only"
            " shortens the model's default_timeout_microseconds, where its queue policy sets allow_timeout_override).",
        ),
    ]


def with_admission(parameters: RequestParameters, priority: int | None, timeout_us: int | None) -> RequestParameters:
    """The request parameters with `priority` / `timeout` set from their flags (a flag given overrides a
    --request-parameter of the same name). Raises UsageError for a --request-parameter of either name
    that is not an int (Triton reads both as integers)."""
    out = {p[0]: p for p in parameters}
    for name, value in (("priority", priority), ("timeout", timeout_us)):
        if value is not None:
            out.pop(name, None)
            out[name] = (name, str(int(value)), "int")
        elif name in out and out[name][2] != "int":
            raise UsageError(
                f"--request-parameter {name}:{out[name][1]}:{out[name][2]}: Triton reads {name!r} as an integer",
                hint=f"give {name}:N:int (or --request-{'priority' if name == 'priority' else 'timeout-us'} N)",
            )
    return tuple(out.values())


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
