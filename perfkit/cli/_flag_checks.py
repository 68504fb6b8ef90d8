"""The values and combinations perf_analyzer 2.60 refuses as it reads its command line: the one list.

Both `perfkit profile` and the `perf_analyzer` command run these checks on their command line before
anything reaches a server (`check_flags`): the `perf_analyzer` command in perf_analyzer's own words
(exit 99), `perfkit profile` as a usage error (exit 2) naming the flag, the value and the range.

Source: triton-inference-server/perf_analyzer `src/command_line_parser.cc`, `CLParser::ParseCommandLine`
(a value is checked as its option is read, in the order given) and `CLParser::VerifyOptions` (the
combination, afterwards, in the order below; read at commit 263c5f6e of 2025-12-15, the refusals that
tests/server/cli/test_pa_verify.py quotes checked against the 2.60.0 binary). Not here: what 2.60 checks
against files or the server (--fixed-schedule's dataset, --input-data kinds), and the flags only the
`perf_analyzer` command acts on (trace settings, --request-parameter's form: `_pa_verify`).
perf_analyzer reads numbers with `std::stoi`/`std::stof`
(the leading number, the rest ignored; no number at all is "Invalid value provided") and --percentile
with `std::atoi` (no number reads as 0). Two readings are not refusals: `--percentile -1` means "no
percentile" and a `--sequence-length` <= 0 is a warning, the default used (`readings`).

Where perfkit does more than perf_analyzer (`--streaming` and `--request-parameter` over HTTP) the
check is the `perf_analyzer` command's only (`drop_in=True`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from perfkit.cli._pa_compat import walk_argv
from perfkit.errors import UsageError

INT_RE = re.compile(r"\s*([+-]?\d+)")
_FLOAT = re.compile(r"\s*([+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|inf(?:inity)?|nan))", re.I)


def stoi(spelling: str, value: str) -> int:
    """`std::stoi` as perf_analyzer calls it: the leading integer; none is perf_analyzer's parse error."""
    m = INT_RE.match(value)
    if m is None:
        raise UsageError(f"Failed to parse {spelling}. Invalid value provided: {value}")
    return int(m.group(1))


def stof(spelling: str, value: str) -> float:
    """`std::stof` as perf_analyzer calls it: the leading number; none is perf_analyzer's parse error."""
    m = _FLOAT.match(value)
    if m is None:
        raise UsageError(f"Failed to parse {spelling}. Invalid value provided: {value}")
    return float(m.group(1))


def atoi(value: str) -> int:
    """`std::atoi`: the leading integer, 0 where there is none."""
    m = INT_RE.match(value)
    return int(m.group(1)) if m else 0


@dataclass(frozen=True)
class ValueCheck:
    """One option's value rule in ParseCommandLine: read as perf_analyzer reads it, refused unless `ok`."""

    spellings: tuple[str, ...]
    read: Callable[[str, str], float]
    ok: Callable[[float], bool]
    range_text: str  # what the value must be, for perfkit's line
    pa_message: str  # perf_analyzer 2.60's words


def _pos(v: float) -> bool:
    return v > 0


def _nonneg(v: float) -> bool:
    return v >= 0


VALUE_CHECKS: tuple[ValueCheck, ...] = (
    ValueCheck(("--max-threads",), stoi, _pos, "> 0", "Failed to parse --max-threads. The value must be > 0."),
    ValueCheck(
        ("-p", "--measurement-interval"),
        stoi,
        _pos,
        "> 0 ms",
        "Failed to parse --measurement-interval (-p). The value must be > 0 msec.",
    ),
    ValueCheck(
        ("-l", "--latency-threshold"),
        stoi,
        _nonneg,
        ">= 0 ms (0: no limit)",
        "Failed to parse --latency-threshold (-l). The value must be >= 0 msecs.",
    ),
    ValueCheck(
        ("-s", "--stability-percentage"),
        stof,
        _nonneg,
        ">= 0",
        "Failed to parse --stability-percentage (-s). The value must be >= 0.0.",
    ),
    ValueCheck(("-r", "--max-trials"), stoi, _pos, "> 0", "Failed to parse --max-trials (-r). The value must be > 0."),
    ValueCheck(("--string-length",), stoi, _pos, "> 0", "Failed to parse --string-length. The value must be > 0"),
    ValueCheck(
        ("--num-of-sequences",), stoi, _pos, "> 0", "Failed to parse --num-of-sequences. The value must be > 0."
    ),
    ValueCheck(
        ("--output-shared-memory-size",),
        stoi,
        _nonneg,
        ">= 0 bytes",
        "Failed to parse --output-shared-memory-size. The value must be >= 0.",
    ),
    ValueCheck(
        ("--measurement-request-count",),
        stoi,
        _pos,
        "> 0",
        "Failed to parse --measurement-request-count. The value must be > 0.",
    ),
    ValueCheck(
        ("--trace-count",),
        stoi,
        lambda v: v >= -1,
        ">= 0, or -1 (no limit)",
        "Failed to parse --trace-count. The value must be >= 0 or set to -1 (default).",
    ),
    ValueCheck(("--log-frequency",), stoi, _nonneg, ">= 0", "Failed to parse --log-frequency. The value must be >= 0."),
    ValueCheck(
        ("--metrics-interval",),
        stoi,
        _pos,
        "> 0 ms",
        "Failed to parse --metrics-interval. The value must be > 0 msecs.",
    ),
    ValueCheck(("--request-period",), stoi, _pos, "> 0", "Failed to parse --request-period. The value must be > 0"),
    ValueCheck(("--request-count",), stoi, _pos, "> 0", "Failed to parse --request-count. The value must be > 0."),
    ValueCheck(
        ("--warmup-request-count",),
        stoi,
        _nonneg,
        ">= 0",
        "Failed to parse --warmup-request-count. The value must be >= 0.",
    ),
    ValueCheck(("-b",), stoi, _pos, "> 0", "Failed to parse -b (batch size). The value must be > 0."),
)
_BY_SPELLING = {s: c for c in VALUE_CHECKS for s in c.spellings}


class _Refuse:
    """Raises the refusal in the words of the command at hand."""

    def __init__(self, drop_in: bool) -> None:
        self.drop_in = drop_in

    def value(self, name: str, value: str, pa_message: str, range_text: str) -> UsageError:
        if self.drop_in:
            return UsageError(pa_message)
        return UsageError(f"{name} {value}: the value must be {range_text}; perf_analyzer refuses it too")

    def combination(self, pa_message: str, perfkit_message: str) -> UsageError:
        return UsageError(pa_message if self.drop_in else perfkit_message)


def _shape(value: str, refuse: _Refuse) -> None:
    """--shape NAME:D1,D2: a colon after the name, every dimension > 0 (std::stoll each)."""
    name, colon, dims = value.rpartition(":")
    if not colon:
        raise refuse.combination(
            "Failed to parse --shape. There must be a colon after input name.",
            f"--shape {value}: expected NAME:D1,D2,... (a colon after the input name)",
        )
    for dim in dims.split(","):
        if stoi("--shape", dim) <= 0:
            raise refuse.value(
                "--shape", value, "Failed to parse --shape. The dimensions of input tensor must be > 0.", "> 0 per dim"
            )


def _sequence_id_range(value: str, refuse: _Refuse) -> None:
    parts = value.split(":")
    if len(parts) > 2:
        raise refuse.combination(
            "Failed to parse --sequence-id-range. The value does not match <start:end>.",
            f"--sequence-id-range {value}: expected START[:END]",
        )
    ids = [stoi("--sequence-id-range", p) for p in parts]
    if min(ids) < 0:
        raise refuse.value(
            "--sequence-id-range", value, "Failed to parse --sequence-id-range. The range values must be >= 0.", ">= 0"
        )
    if len(ids) == 2 and ids[0] > ids[1]:
        raise refuse.combination(
            "Failed to parse --sequence-id-range. The 'end' value must be greater than 'start' value.",
            f"--sequence-id-range {value}: the end must not be below the start",
        )


def _range(value: str, kind: Callable[[str], float]) -> tuple[float, float]:
    """START[:END[:STEP]] as perf_analyzer keeps it: END is 1 unless given (its default range is 1:1:1)."""
    parts = value.split(":")
    try:
        start = kind(parts[0])
        end = kind(parts[1]) if len(parts) > 1 else 1.0
    except ValueError:
        return 1.0, 1.0  # not a number: the option's own parser says so
    return start, end


def _number(text: str, drop_in: bool, read: Callable[[str, str], float], name: str) -> float | None:
    """The value as the command at hand reads it: perf_analyzer's reading for the drop-in; for `perfkit
    profile` the number perfkit's option takes (a float here), None where it is none (click says so)."""
    if drop_in:
        return read(name, text)
    try:
        return float(text)
    except ValueError:
        return None


def check_flags(args: list[str], *, drop_in: bool) -> None:
    """Refuse what perf_analyzer 2.60 refuses as it reads `args` (UsageError): per option in their order,
    then VerifyOptions' checks in its order. `drop_in`: the `perf_analyzer` command (2.60's words, and the
    checks of what only perfkit profile does beyond perf_analyzer)."""
    refuse = _Refuse(drop_in)
    given: dict[str, str] = {}
    flags: set[str] = set()
    protocol = next((b.lower() for a, b in zip(args, args[1:]) if a == "--protocol"), "http")
    for name, flag, value in walk_argv(list(args)):
        if flag is None:
            continue
        if value is None:
            flags.add(flag.spellings[-1])
            continue
        long_name = flag.spellings[-1]
        given[long_name] = value
        if long_name == "-i":
            protocol = value.lower()
        check = _BY_SPELLING.get(name)
        if check is not None:
            number = _number(value, drop_in, check.read, name)
            if number is not None and not check.ok(number):
                raise refuse.value(name, value, check.pa_message, check.range_text)
        elif name == "--shape":
            _shape(value, refuse)
        elif name == "--sequence-id-range":
            _sequence_id_range(value, refuse)
        elif name == "--sequence-length-variation":
            variation = _number(value, drop_in, stof, name)
            if variation is not None and variation < 0:  # checked in VerifyOptions, after the whole line
                given["!variation"] = value
    _verify_options(given, flags, protocol, refuse)


def _verify_options(given: dict[str, str], flags: set[str], protocol: str, refuse: _Refuse) -> None:
    """CLParser::VerifyOptions' checks on what perfkit reads too, in its order."""
    conc = _range(given.get("--concurrency-range") or given.get("-t") or "1", float)
    rate = _range(given.get("--request-rate-range", "1"), float)
    if conc[0] <= 0:
        raise refuse.combination(
            "The start of the search range must be > 0",
            f"--concurrency-range {given.get('--concurrency-range')}: the start must be > 0",
        )
    if rate[0] <= 0:
        raise refuse.combination(
            "Failed to parse --request-rate-range. The start of the search range must be > 0.",
            f"--request-rate-range {given.get('--request-rate-range')}: the start must be > 0",
        )
    if refuse.drop_in and "--streaming" in flags and protocol != "grpc":
        raise UsageError("Streaming is only allowed with gRPC protocol and Triton C API.")
    if "!variation" in given:
        raise refuse.value(
            "--sequence-length-variation",
            given["!variation"],
            "Failed to parse --sequence-length-variation. The value must be >= 0.0.",
            ">= 0 percent",
        )
    if "--percentile" in given:
        text = given["--percentile"]
        if refuse.drop_in:
            pct: float = atoi(text)
            ok = pct == -1 or 1 <= pct <= 99
        else:  # perfkit reads a fraction (99.9); -1 is "none", as perf_analyzer
            try:
                pct = float(text)
            except ValueError:
                pct = -1.0  # not a number: click says so
            ok = pct == -1 or 0 < pct < 100
        if not ok:
            raise refuse.value(
                "--percentile",
                text,
                "Failed to parse --percentile. The value must be -1 for not reporting or in range (0, 100).",
                "in (0, 100), or -1 for none",
            )
    if "--async" in flags and "--sync" in flags:
        raise refuse.combination(
            "Cannot specify --async and --sync simultaneously.", "-a/--async and --sync: give one of them, not both"
        )
    _search(given, flags, conc, rate, refuse)
    _request_count(given, conc, rate, refuse)
    if refuse.drop_in and "--request-parameter" in given and protocol != "grpc":
        raise UsageError("The --request-parameter option is currently only supported by gRPC protocol.")
    for name in ("--metrics-url", "--metrics-interval"):
        if name in given and "--collect-metrics" not in flags:
            raise refuse.combination(
                f"Must specify --collect-metrics when using the {name} option.",
                f"{name} {given[name]}: needs --collect-metrics (perf_analyzer refuses it alone)",
            )


def _search(
    given: dict[str, str], flags: set[str], conc: tuple[float, float], rate: tuple[float, float], refuse: _Refuse
) -> None:
    """VerifyOptions on the range, -l and --binary-search (perf_analyzer's NO_LIMIT is 0)."""
    binary = "--binary-search" in flags
    limit = given.get("--latency-threshold")
    latency = (_number(limit, refuse.drop_in, stoi, "-l") or 0) if limit is not None else 0
    open_end = conc[1] == 0 or rate[1] == 0
    if open_end and latency == 0:
        raise refuse.combination(
            "The end of the search range and the latency limit can not be both 0 (or 0.0) simultaneously",
            "a range ending at 0 (no end) needs -l (a latency limit > 0)",
        )
    if open_end and binary:
        raise refuse.combination(
            "The end of the range can not be 0 (or 0.0) for binary search mode.",
            "--binary-search: the range needs an end (not 0)",
        )
    if binary and latency == 0:
        raise refuse.combination(
            "The --latency-threshold cannot be 0 for binary search mode.", "--binary-search needs -l (> 0 ms)"
        )
    if binary and (conc[1] < conc[0] or rate[1] < rate[0]):
        raise refuse.combination(
            "The end of the range can not be less than start of the range for binary search mode.",
            "--binary-search: the range needs START:END with END >= START",
        )
    warmup = given.get("--warmup-request-count")
    if warmup is not None and atoi(warmup) != 0:
        if "--request-rate-range" not in given and conc[0] < conc[1]:
            raise refuse.combination(
                "--warmup-request-count not supported with multiple concurrency values in one run",
                f"--warmup-request-count {warmup}: not with several concurrency values (one per run)",
            )
        if "--request-rate-range" in given and rate[0] < rate[1]:
            raise refuse.combination(
                "--warmup-request-count not supported with multiple request rate values in one run",
                f"--warmup-request-count {warmup}: not with several request rates (one per run)",
            )


def _request_count(
    given: dict[str, str], conc: tuple[float, float], rate: tuple[float, float], refuse: _Refuse
) -> None:
    """VerifyOptions on --request-count: one load value, no fewer requests than it (concurrency or request
    rate mode; not --request-intervals)."""
    text = given.get("--request-count")
    if text is None or atoi(text) == 0 or "--request-intervals" in given:
        return
    count = atoi(text)
    mode, (start, end) = ("request rate", rate) if "--request-rate-range" in given else ("concurrency", conc)
    if count < int(start):
        raise refuse.combination(
            f"--request-count can not be less than {mode}",
            f"--request-count {text} can not be less than {mode} {start:g}",
        )
    if start < end:
        raise refuse.combination(
            f"--request-count not supported with multiple {mode} values in one run",
            f"--request-count {text}: not supported with several load values in one run",
        )


def readings(args: list[str], warn: Callable[[str], None]) -> list[str]:
    """`args` with perf_analyzer's readings that are not refusals: `--percentile -1` (no percentile) taken
    out; a `--sequence-length` <= 0 taken out with perf_analyzer's warning (its default is used)."""
    out: list[str] = []
    for name, flag, value in walk_argv(args):
        if flag is None or value is None:
            out.append(name)
            continue
        if name == "--percentile" and atoi(value) == -1 and _is_minus_one(value):
            continue
        if name == "--sequence-length" and INT_RE.match(value) and atoi(value) <= 0:
            warn(
                "WARNING: The sequence length must be > 0. Perf Analyzer will use default value if it is measuring"
                " on sequence model."
            )
            continue
        out.extend([name, value])
    return out


def _is_minus_one(value: str) -> bool:
    try:
        return float(value) == -1
    except ValueError:
        return atoi(value) == -1
