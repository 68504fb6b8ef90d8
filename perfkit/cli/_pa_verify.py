"""What perf_analyzer 2.60 refuses when it reads its command line, refused the same way.

The value and combination checks both commands make are in `_flag_checks` (written once); here are the
`perf_analyzer` command's own: the trace flags it sends to the server and --request-parameter's form.

perf_analyzer checks some values as it parses each option (`CLParser::ParseCommandLine`) and the
combination afterwards (`CLParser::VerifyOptions`), both in `src/command_line_parser.cc`; either
prints the usage and `Error: <message>` and exits 99. The `perf_analyzer` command makes the same
checks, in the same order, with the same words (one line, exit 99), before perfkit reads the
command line, so a value perf_analyzer refuses is never measured. Values are read as perf_analyzer
reads them: `std::stoi`/`std::stof` (leading number, the rest ignored; no number at all is "Invalid
value provided") and `std::atoi` for --percentile (no number reads as 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from perfkit.cli._flag_checks import INT_RE, atoi, check_flags, readings
from perfkit.cli._pa_compat import walk_argv
from perfkit.errors import UsageError

TRACE_LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")


@dataclass(frozen=True)
class PaTraceSettings:
    """Triton trace settings from --trace-level/--trace-rate/--trace-count/--log-frequency (strings, as
    perf_analyzer sends them to /v2/trace/setting); the last of a repeated flag wins, as in perf_analyzer."""

    settings: tuple[tuple[str, str], ...]

    def body(self) -> dict[str, object]:
        """The JSON body of Triton's trace settings update (trace_level is a list)."""
        return {k: ([v] if k == "trace_level" else v) for k, v in self.settings}


_INT32 = (-(2**31), 2**31 - 1)


def _request_parameter_as_sent(value: str) -> str | None:
    """NAME:VALUE:TYPE as perf_analyzer 2.60's gRPC client sends it (tritonclient's grpc_client.cc,
    PreRunProcessing): TYPE lower-cased; "int" read by std::stoi; "bool" true only for "true"; any other
    TYPE not sent at all (None, with a line on stderr). An int std::stoi cannot read aborts perf_analyzer
    at its first request: refused here, before anything is measured."""
    name, text, kind = value.split(":")
    kind = kind.lower()
    if kind == "int":
        m = INT_RE.match(text)
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
    """Refuse what perf_analyzer 2.60 refuses when parsing `args` (UsageError, its words: the checks of
    `_flag_checks`, shared with `perfkit profile`, and those on the flags only this command acts on); return
    the command line with perf_analyzer's readings applied (--percentile -1 dropped, --percentile read as an
    integer, a --sequence-length <= 0 dropped with its warning; trace flags taken out) and the trace
    settings to apply, if any."""
    out: list[str] = []
    trace: dict[str, str] = {}
    percentile: int | None = None
    params: dict[str, str] = {}
    for name, flag, value in walk_argv(args):
        if flag is None or value is None:
            out.append(name)
            continue
        if name == "--percentile":
            percentile = atoi(value)
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
        if name in ("--trace-rate", "--trace-count", "--log-frequency"):
            trace[name[2:].replace("-", "_")] = value
            continue
        out.extend([name, value])
    check_flags(args, drop_in=True)
    out = readings(out, lambda line: click.echo(line, err=True))
    if percentile is not None and percentile != -1:
        out += ["--percentile", str(percentile)]
    for value in params.values():
        sent = _request_parameter_as_sent(value)
        if sent is not None:
            out += ["--request-parameter", sent]
    return out, (PaTraceSettings(tuple(trace.items())) if trace else None)
