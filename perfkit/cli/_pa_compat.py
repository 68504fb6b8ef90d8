"""perf_analyzer's command-line forms on `perfkit profile`, and its exit codes.

perf_analyzer parses with getopt_long: short flags cluster and take attached values (`-vp2000`,
`-t5`), long flags take `--flag=value` or `--flag value`, and several values are read without
regard to case (`-i GRPC`). `normalize_argv` turns such a command line into perfkit's, by the
table in `_pa_flags`: deprecated aliases are rewritten, no-op flags dropped (noted for -v), and
flags perfkit does not carry out refused with one line that says why. Tokens that are not
perf_analyzer flags (perfkit's own) pass through untouched.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from perfkit.cli._pa_flags import BY_SPELLING, PaFlag
from perfkit.errors import ExitCode, UsageError

# getopt's short options taking a value, and those that do not ("vdazc:u:m:x:b:t:p:i:H:l:r:s:f:")
_SHORT_VALUE = set("cumxbtpiHlrsf")
_SHORT_FLAG = set("vdaz")


def normalize_argv(args: list[str]) -> tuple[list[str], list[str]]:
    """perfkit's argv for a perf_analyzer-style one, and notes on what was accepted as a no-op.

    Raises UsageError for a flag perfkit refuses (the message says why and what to use).
    """
    out: list[str] = []
    notes: list[str] = []
    for name, flag, value in walk_argv(args):
        if flag is None:
            out.append(name)
        else:
            out.extend(_rewrite(name, flag, value, notes))
    return out, notes


def walk_argv(args: list[str]) -> Iterator[tuple[str, PaFlag | None, str | None]]:
    """perf_analyzer's flags as getopt_long reads them: (spelling, flag, value) in order; other tokens
    (perfkit's own, everything after `--`) as (token, None, None). Raises UsageError for a flag
    missing its value or a cluster with an unknown letter."""
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if tok == "--":
            for rest in args[i - 1 :]:
                yield rest, None, None
            return
        if tok.startswith("--"):
            name, eq, attached = tok.partition("=")
            flag = BY_SPELLING.get(name)
            if flag is None:
                yield tok, None, None
                continue
            value = None
            if flag.takes_value:
                if eq:
                    value = attached
                elif i < len(args):
                    value, i = args[i], i + 1
                else:
                    raise UsageError(f"{name} needs a value")
            elif eq:
                raise UsageError(f"{name} takes no value (got {tok!r})")
            yield name, flag, value
            continue
        if len(tok) > 1 and tok[0] == "-" and tok[1] in (_SHORT_VALUE | _SHORT_FLAG | {"?"}):
            # a getopt cluster: flags without values, then at most one flag taking the rest as value
            j = 1
            while j < len(tok):
                ch = tok[j]
                name = f"-{ch}"
                if ch == "?" or ch in _SHORT_FLAG:
                    yield name, BY_SPELLING[name], None
                    j += 1
                    continue
                if ch not in _SHORT_VALUE:
                    raise UsageError(f"{tok}: unknown flag -{ch} in a cluster of perf_analyzer flags")
                value = tok[j + 1 :]
                if not value:
                    if i >= len(args):
                        raise UsageError(f"{name} needs a value")
                    value, i = args[i], i + 1
                yield name, BY_SPELLING[name], value
                break
            continue
        yield tok, None, None


def _rewrite(name: str, flag: PaFlag, value: str | None, notes: list[str]) -> list[str]:
    if value is not None and flag.lower_value:
        value = value.lower()
    if value is not None and (flag.noop_values or flag.refused_values):
        if value in flag.noop_values:
            return _noop(name, flag, value, notes)
        reasons = dict(flag.refused_values)
        reason = reasons.get(value) or reasons.get("*")
        if reason:
            raise UsageError(f"{name} {value}: {reason}")
    if flag.status == "refused":
        raise UsageError(f"{name}: {flag.note}")
    if flag.status == "accepted":
        return _noop(name, flag, value, notes)
    if name == "-t":
        return ["--concurrency-range", str(value)]
    if name == "-z":
        return ["--input-data", "zero"]
    if name == "--data-directory":
        return ["--input-data", str(value)]
    if name == "-?":
        return ["--help"]
    return [name] if value is None else [name, value]


def _noop(name: str, flag: PaFlag, value: str | None, notes: list[str]) -> list[str]:
    notes.append(f"{name}{'' if value is None else ' ' + value}: {flag.note}")
    return []


class PaCompatCommand(click.Command):
    """A click command that first reads perf_analyzer's command-line forms (see normalize_argv)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # what perf_analyzer refuses is refused here too, before any server is reached (imported here:
        # _flag_checks reads argv with walk_argv, from this module)
        from perfkit.cli._flag_checks import check_flags, readings

        args = readings(list(args), lambda line: click.echo(line, err=True))
        check_flags(args, drop_in=False)
        norm, notes = normalize_argv(args)
        ctx.meta["perfkit.pa_notes"] = notes
        return super().parse_args(ctx, norm)


def pa_notes() -> list[str]:
    """The no-op flags of the running command line (for -v), or [] outside a command."""
    ctx = click.get_current_context(silent=True)
    return list(ctx.meta.get("perfkit.pa_notes", [])) if ctx is not None else []


# -- exit codes ----------------------------------------------------------------------------------

PA_SUCCESS = 0
PA_STABILITY_ERROR = 2  # perf_analyzer: a measurement did not stabilise
PA_GENERIC_ERROR = 99  # perf_analyzer: every other failure, usage errors included

EXIT_CODES_ENV = "PERFKIT_EXIT_CODES"


def pa_exit_codes() -> bool:
    """Whether exit codes follow perf_analyzer's (PERFKIT_EXIT_CODES=perf_analyzer)."""
    return os.environ.get(EXIT_CODES_ENV, "").strip().lower() in ("perf_analyzer", "perf-analyzer")


def to_pa_exit_code(code: int) -> int:
    """perfkit's exit code as perf_analyzer would give it: 0, 2 (unstable), 99 (anything else)."""
    if code == ExitCode.OK:
        return PA_SUCCESS
    if code == PA_STABILITY_ERROR_MARK:
        return PA_STABILITY_ERROR
    if code == ExitCode.INTERRUPTED:
        return int(ExitCode.INTERRUPTED)
    return PA_GENERIC_ERROR


# perfkit reports an unstable level flagged and exits 0; under perf_analyzer's codes such a run
# exits 2. The profile command returns this marker (never a perfkit code) for the mapping.
PA_STABILITY_ERROR_MARK = 1002


def unstable_exit(record: Any) -> int:
    """The code the profile command returns: 0, or the unstable marker under perf_analyzer's codes.

    perf_analyzer says why each level failed (past -l, or not stable) and exits 2 only when a sweep's first
    level was not stable, its sweep ending there; a binary search, or a sweep that stopped later, exits 0
    (src/inference_profiler.h at commit 263c5f6e, Profile: "If there was only one concurrency we swept over
    and it did not meet the stability threshold, we should return an error")."""
    if not pa_exit_codes() or all(lv.stable for lv in record.levels):
        return int(ExitCode.OK)
    spec = record.spec
    for lv in record.levels:
        if lv.stable:
            continue
        lat = lv.latency("service")
        value_us = lat.mean_us if spec.percentile is None else lat.percentile_us(spec.percentile)
        if (
            spec.latency_threshold_ms is not None
            and value_us is not None
            and value_us >= spec.latency_threshold_ms * 1e3
        ):
            click.echo(f"Measured latency went over the set limit of {spec.latency_threshold_ms:g} msec. ", err=True)
            continue
        # perf_analyzer's words: tools (model_analyzer) look for them to retry with longer windows
        click.echo(
            f"Failed to obtain stable measurement within {len(lv.windows)} measurement windows for"
            f" {lv.load.mode.replace('_', ' ')} {lv.load.value:g}. Please try to increase the"
            " --measurement-interval.",
            err=True,
        )
    if spec.stop_rule != "stability" or (not spec.binary_search and not record.levels[0].stable):
        return PA_STABILITY_ERROR_MARK
    return int(ExitCode.OK)


# -- perf_analyzer's flags that need an option of their own on `perfkit profile` ------------------


def pa_options() -> Any:
    """Decorator adding -v, --string-data and --bls-composing-models (perf_analyzer's spellings)."""
    opts = [
        click.option(
            "-v",
            "--verbose",
            "pa_verbose",
            count=True,
            help="More detail: -v says how perf_analyzer flags were read; -v -v logs perfkit's steps too.",
        ),
        click.option(
            "-H",
            "http_headers",
            multiple=True,
            metavar="NAME:VALUE",
            help="A header on every infer request (repeatable): HTTP headers, gRPC metadata.",
        ),
        click.option(
            "--grpc-compression-algorithm",
            "grpc_compression",
            type=click.Choice(["none", "gzip", "deflate"]),
            default="none",
            show_default=True,
            help="Compress gRPC requests, unary and streamed (-i grpc only, as perf_analyzer).",
        ),
        click.option(
            "--input-tensor-format",
            type=click.Choice(["binary", "json"]),
            default="binary",
            show_default=True,
            help="HTTP: send input tensors as binary or as JSON data.",
        ),
        click.option(
            "--output-tensor-format",
            type=click.Choice(["binary", "json"]),
            default="binary",
            show_default=True,
            help="HTTP: ask for output tensors as binary or as JSON.",
        ),
        click.option(
            "--profile-export-file",
            type=click.Path(path_type=Path),
            default=None,
            help="Write every request's send and response timestamps here, in perf_analyzer's JSON layout.",
        ),
        click.option(
            "--string-data", default=None, help="Generated data: every BYTES element holds this string (as in PA)."
        ),
        click.option(
            "--measurement-mode",
            type=click.Choice(["time_windows", "count_windows"]),
            default="time_windows",
            show_default=True,
            help="time_windows: windows of -p ms; count_windows: a window ends at the first whole second holding"
            " --measurement-request-count completed requests.",
        ),
        click.option(
            "--measurement-request-count",
            type=int,
            default=50,
            show_default=True,
            help="With --measurement-mode count_windows: requests per window, at least.",
        ),
        click.option(
            "--periodic-concurrency-range",
            "periodic_range",
            default=None,
            metavar="START:END[:STEP]",
            help="Decoupled models (-i grpc --streaming): START requests, STEP more each time every request had"
            " --request-period responses, END in all; the run ends when END requests have ended. Needs"
            " --profile-export-file (perf_analyzer's rule).",
        ),
        click.option(
            "--request-period",
            type=int,
            default=10,
            show_default=True,
            help="With --periodic-concurrency-range: responses each request gets before STEP more start.",
        ),
        click.option(
            "--bls-composing-models",
            default=None,
            metavar="M1[:V],M2",
            help="Models a BLS model calls: their statistics join the server breakdown.",
        ),
    ]

    def wrap(f: Any) -> Any:
        for opt in reversed(opts):
            f = opt(f)
        return f

    return wrap


def pa_spec_fields(kw: dict[str, Any]) -> dict[str, Any]:
    """ProfileSpec fields from pa_options (consumed from kw); sets up -v's logging and notes."""
    import logging

    verbose = kw.pop("pa_verbose")
    if verbose:
        logging.basicConfig(format="perfkit: %(name)s: %(message)s")
        logging.getLogger("perfkit").setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
        for note in pa_notes():
            click.echo(f"perfkit: {note}", err=True)
    bls = kw.pop("bls_composing_models")
    names = tuple(m.strip().partition(":")[0] for m in bls.split(",") if m.strip()) if bls else ()
    headers = []
    for item in kw.pop("http_headers"):
        name, sep, value = item.partition(":")
        if not sep or not name.strip() or any(c in item for c in "\r\n"):
            raise UsageError(f"-H {item!r}: expected NAME:VALUE on one line")
        headers.append((name.strip(), value.strip()))
    export = kw.pop("profile_export_file")
    ctx = click.get_current_context(silent=True)
    protocol = kw.get("protocol") or (ctx.params.get("protocol") if ctx is not None else None)
    if kw.get("grpc_compression", "none") != "none" and protocol == "http":
        # perf_analyzer's rule (src/command_line_parser.cc, VerifyOptions)
        raise UsageError("Using compression algorithm is only allowed with gRPC protocol.")
    count = kw.pop("measurement_request_count", 50)  # > 0: checked with the other values (_flag_checks)
    request_period = kw.pop("request_period", 10)
    periodic = periodic_range(kw.pop("periodic_range", None), request_period, kw, export)
    return {
        "periodic_concurrency": periodic,
        "request_period": request_period,
        "measurement_mode": kw.pop("measurement_mode", "time_windows"),
        "measurement_request_count": count,
        "string_data": kw.pop("string_data"),
        "bls_composing_models": names,
        "http_headers": tuple(headers),
        "profile_export_file": str(export) if export else None,
        "grpc_compression": "" if (c := kw.pop("grpc_compression")) == "none" else c,
        "input_tensor_format": kw.pop("input_tensor_format"),
        "output_tensor_format": kw.pop("output_tensor_format"),
    }


def periodic_range(
    text: str | None, request_period: int, kw: dict[str, Any], export: Path | None
) -> tuple[int, int, int] | None:
    """--periodic-concurrency-range as (start, end, step), by perf_analyzer's rules and in its words
    (src/command_line_parser.cc: the option's parsing, and VerifyOptions); raises UsageError. --request-period > 0 is
    checked with the other values, before click parses (_flag_checks)."""
    if text is None:
        return None
    what = "Failed to parse --periodic-concurrency-range."
    values = text.split(":")
    if len(values) < 2:
        raise UsageError(f"{what} Both <start> and <end> values must be provided.")
    if len(values) > 3:
        raise UsageError(f"{what} The value does not match <start:end:step>.")
    try:
        start, end, step = (int(v) for v in [*values, "1"][:3])
    except ValueError:
        raise UsageError(f"{what} The value does not match <start:end:step>: integers expected.") from None
    if step <= 0:
        raise UsageError(f"{what} The <step> value must be > 0.")
    if start > end:
        raise UsageError(f"{what} The <start> must be <= <end>.")
    if (end - start) % step != 0:
        raise UsageError(f"{what} The <step> value must be a factor of the range size (<end> - <start>).")
    if start <= 0:
        # perf_analyzer accepts 0 and then waits forever: no request, so no period ever completes
        raise UsageError(f"{what} The <start> must be > 0: with no request in flight the ramp never begins.")
    ctx = click.get_current_context(silent=True)
    given = {**(ctx.params if ctx is not None else {}), **kw}  # flags other option groups consumed too
    if any(given.get(k) for k in ("concurrency_range", "request_rate_range", "request_intervals", "fixed_schedule")):
        raise UsageError(
            "Cannot specify more then one inference load mode. Please choose only one of the following modes:"
            " --concurrency-range, --periodic-concurrency-range, --request-rate-range, or --request-intervals"
        )
    if given.get("trace") or given.get("request_count") or given.get("binary_search"):
        raise UsageError(
            "--periodic-concurrency-range is one ramp: not with a trace, --request-count or --binary-search"
        )
    if given.get("protocol") != "grpc" or not given.get("streaming"):
        raise UsageError("The --periodic-concurrency-range option requires bi-directional gRPC streaming.")
    if export is None:
        raise UsageError("Must provide --profile-export-file when using the --periodic-concurrency-range option.")
    return start, end, step


def input_data_sources(values: tuple[str, ...]) -> str | None:
    """`--input-data` given once or repeated, as ProfileSpec.input_data; None when not given.

    Repeated, its sources are joined by os.pathsep (perf_analyzer appends their streams); 'zero'
    and 'random' must stand alone. Raises UsageError.
    """
    import os

    if not values:
        return None
    if len(values) == 1:
        return values[0]
    if any(v in ("zero", "random") for v in values):
        raise UsageError(f"--input-data {' '.join(values)}: 'zero' and 'random' cannot be combined with files")
    if any(os.pathsep in v for v in values):
        raise UsageError(f"--input-data: a repeated source may not contain {os.pathsep!r}")
    return os.pathsep.join(values)
