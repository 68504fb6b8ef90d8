"""What perf_analyzer 2.60 refuses when it reads its command line, refused the same way.

perf_analyzer checks some values as it parses each option (`CLParser::ParseCommandLine`) and the
combination afterwards (`CLParser::VerifyOptions`), both in `src/command_line_parser.cc`; either
prints the usage and `Error: <message>` and exits 99. The `perf_analyzer` command makes the same
checks, in the same order, with the same words (one line, exit 99), before perfkit reads the
command line, so a value perf_analyzer refuses is never measured. Values are read as perf_analyzer
reads them: `std::stoi`/`std::stof` (leading number, the rest ignored; no number at all is "Invalid
value provided") and `std::atoi` for --percentile (no number reads as 0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import click

from perfkit.cli._pa_compat import walk_argv
from perfkit.errors import UsageError

_INT = re.compile(r"\s*([+-]?\d+)")
_FLOAT = re.compile(r"\s*([+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|inf(?:inity)?|nan))", re.I)

TRACE_LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")


@dataclass(frozen=True)
class PaTraceSettings:
    """Triton trace settings from --trace-level/--trace-rate/--trace-count/--log-frequency (strings, as
    perf_analyzer sends them to /v2/trace/setting); the last of a repeated flag wins, as in perf_analyzer."""

    settings: tuple[tuple[str, str], ...]

    def body(self) -> dict[str, object]:
        """The JSON body of Triton's trace settings update (trace_level is a list)."""
        return {k: ([v] if k == "trace_level" else v) for k, v in self.settings}


def _stoi(spelling: str, value: str) -> int:
    m = _INT.match(value)
    if m is None:
        raise UsageError(f"Failed to parse {spelling}. Invalid value provided: {value}")
    return int(m.group(1))


def _stof(spelling: str, value: str) -> float:
    m = _FLOAT.match(value)
    if m is None:
        raise UsageError(f"Failed to parse {spelling}. Invalid value provided: {value}")
    return float(m.group(1))


def _atoi(value: str) -> int:
    m = _INT.match(value)
    return int(m.group(1)) if m else 0


_INT32 = (-(2**31), 2**31 - 1)


def _request_parameter_as_sent(value: str) -> str | None:
    """NAME:VALUE:TYPE as perf_analyzer 2.60's gRPC client sends it (tritonclient's grpc_client.cc,
    PreRunProcessing): TYPE lower-cased; "int" read by std::stoi; "bool" true only for "true"; any other
    TYPE not sent at all (None, with a line on stderr). An int std::stoi cannot read aborts perf_analyzer
    at its first request: refused here, before anything is measured."""
    name, text, kind = value.split(":")
    kind = kind.lower()
    if kind == "int":
        m = _INT.match(text)
        if m is None or not _INT32[0] <= int(m.group(1)) <= _INT32[1]:
            raise UsageError(
                f"--request-parameter {value}: {text!r} is no int perf_analyzer can read (std::stoi: an int32);"
                " it would abort at its first request"
            )
        return f"{name}:{int(m.group(1))}:int"
    if kind == "bool":
        return f"{name}:{'true' if text == 'true' else 'false'}:bool"
    if kind == "string":
        return f"{name}:{text}:string"
    click.echo(
        f"perfkit: --request-parameter {value}: not sent (perf_analyzer 2.60 sends types string, int and bool"
        f" only, and skips {kind!r})",
        err=True,
    )
    return None


def verify_like_pa(args: list[str]) -> tuple[list[str], PaTraceSettings | None]:
    """Refuse what perf_analyzer 2.60 refuses when parsing `args` (UsageError, its words); return the
    command line with perf_analyzer's readings applied (--percentile -1 dropped, --percentile read as
    an integer; trace flags taken out) and the trace settings to apply, if any."""
    out: list[str] = []
    trace: dict[str, str] = {}
    protocol = "http"
    streaming = collect = metrics_url = metrics_interval = False
    percentile: int | None = None
    params: dict[str, str] = {}
    for name, flag, value in walk_argv(args):
        if flag is None or value is None:
            streaming |= name == "--streaming"
            collect |= name == "--collect-metrics"
            out.append(name)
            continue
        if name in ("-p", "--measurement-interval") and _stoi(name, value) <= 0:
            raise UsageError("Failed to parse --measurement-interval (-p). The value must be > 0 msec.")
        if name in ("-l", "--latency-threshold") and _stoi(name, value) < 0:
            raise UsageError("Failed to parse --latency-threshold (-l). The value must be >= 0 msecs.")
        if name in ("-s", "--stability-percentage") and _stof(name, value) < 0:
            raise UsageError("Failed to parse --stability-percentage (-s). The value must be >= 0.0.")
        if name in ("-r", "--max-trials") and _stoi(name, value) <= 0:
            raise UsageError("Failed to parse --max-trials (-r). The value must be > 0.")
        if name == "--warmup-request-count" and _stoi(name, value) < 0:
            raise UsageError("Failed to parse --warmup-request-count. The value must be >= 0.")
        if name == "--metrics-interval":
            metrics_interval = True
            if _stoi(name, value) <= 0:
                raise UsageError("Failed to parse --metrics-interval. The value must be > 0 msecs.")
        metrics_url |= name == "--metrics-url"
        if name == "-i":
            protocol = value.lower()
        if name == "--percentile":
            percentile = _atoi(value)
            continue  # put back below, as perf_analyzer read it
        if name == "--request-parameter":
            if len(value.split(":")) != 3:
                raise UsageError("Failed to parse --request-parameter. The value does not match <name:value:type>.")
            params[value.split(":")[0]] = value  # perf_analyzer keeps them in a map: the last of a name wins
            continue
        if name == "--trace-level":
            if value not in TRACE_LEVELS:
                raise UsageError(
                    f"Failed to parse --trace-level. Unsupported type provided: '{value}'. The available options"
                    " are 'OFF', 'TIMESTAMPS', or 'TENSORS'."
                )
            trace["trace_level"] = value
            continue
        if name == "--trace-rate":
            trace["trace_rate"] = value
            continue
        if name == "--trace-count":
            if _stoi(name, value) < -1:
                raise UsageError("Failed to parse --trace-count. The value must be >= 0 or set to -1 (default).")
            trace["trace_count"] = value
            continue
        if name == "--log-frequency":
            if _stoi(name, value) < 0:
                raise UsageError("Failed to parse --log-frequency. The value must be >= 0.")
            trace["log_frequency"] = value
            continue
        out.extend([name, value])
    # VerifyOptions, in its order
    if streaming and protocol != "grpc":
        raise UsageError("Streaming is only allowed with gRPC protocol and Triton C API.")
    if percentile is not None and percentile != -1 and not 1 <= percentile <= 99:
        raise UsageError("Failed to parse --percentile. The value must be -1 for not reporting or in range (0, 100).")
    if params and protocol != "grpc":
        raise UsageError("The --request-parameter option is currently only supported by gRPC protocol.")
    if metrics_url and not collect:
        raise UsageError("Must specify --collect-metrics when using the --metrics-url option.")
    if metrics_interval and not collect:
        raise UsageError("Must specify --collect-metrics when using the --metrics-interval option.")
    if percentile is not None and percentile != -1:
        out += ["--percentile", str(percentile)]
    for value in params.values():
        sent = _request_parameter_as_sent(value)
        if sent is not None:
            out += ["--request-parameter", sent]
    return out, (PaTraceSettings(tuple(trace.items())) if trace else None)
