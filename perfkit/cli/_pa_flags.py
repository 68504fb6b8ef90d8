"""Every perf_analyzer flag, with what `perfkit profile` does with it: the one table.

The argv normaliser (`_pa_compat.normalize_argv`) rewrites, drops or refuses perf_analyzer's
flags by this table, and the documentation's "perf_analyzer flags" page is rendered from it
(`render_markdown`); a test checks both against perf_analyzer's own option list.

Status:
  same      perfkit does what perf_analyzer does (same spelling, same meaning)
  differs   accepted and acted on, with a documented difference
  mapped    rewritten to perfkit's own flag (deprecated aliases)
  accepted  accepted with no effect: perfkit always behaves that way (said with -v)
  refused   exit 2 with one line: why, and what to use instead (the note says where the `perf_analyzer`
            command does more, as for the trace flags)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["same", "differs", "mapped", "accepted", "refused"]


@dataclass(frozen=True)
class PaFlag:
    """One perf_analyzer flag: its spellings, whether it takes a value, and perfkit's handling."""

    spellings: tuple[str, ...]
    takes_value: bool
    status: Status
    note: str
    # value -> refusal reason for values perfkit does not act on (lower-cased); "*" any other value
    refused_values: tuple[tuple[str, str], ...] = ()
    # values accepted as a no-op (lower-cased): e.g. --service-kind triton
    noop_values: tuple[str, ...] = ()
    lower_value: bool = False  # perf_analyzer reads the value case-insensitively (-i GRPC)


_CAPI = "the C API service kind runs Triton in-process; perfkit drives a server over HTTP/gRPC"
_TRACE = "set tracing on the server (tritonserver --trace-config, or Triton's trace/setting API)"
_TRACE_PA = (
    "sets the server's trace settings (Triton's trace API over the run's protocol) before measuring and leaves them"
    " set, as perf_analyzer"
)
_DYN = "perfkit drives Triton's KServe v2 protocol (service kind triton) and OpenAI-compatible servers (openai)"

PA_FLAGS: tuple[PaFlag, ...] = (
    PaFlag(
        ("-?", "-h", "--help"),
        False,
        "differs",
        "prints perfkit's help (perfkit's own flags too); perf_analyzer 2.60 has none (exit 99, an invalid option)",
    ),
    PaFlag(("-m",), True, "same", "model name"),
    PaFlag(("-x",), True, "same", "model version"),
    PaFlag(
        ("--service-kind",),
        True,
        "differs",
        "`triton` (the default) and `openai` (an OpenAI-compatible server, docs/guides/openai.md); other kinds refused",
        refused_values=(("triton_c_api", _CAPI), ("tfserving", _DYN), ("torchserve", _DYN), ("dynamic_grpc", _DYN)),
        noop_values=("triton",),
        lower_value=True,
    ),
    PaFlag(("--bls-composing-models",), True, "same", "their statistics join the server breakdown"),
    PaFlag(("--model-signature-name",), True, "accepted", "used by perf_analyzer only with tfserving; ignored"),
    PaFlag(("-v",), False, "same", "verbose; `-v -v` extra verbose (perfkit's logs at INFO, then DEBUG)"),
    PaFlag(
        ("--measurement-mode",),
        True,
        "differs",
        "`time_windows`: windows of -p ms; `count_windows`: a window ends at the first whole second (perf_analyzer"
        " looks once a second) holding --measurement-request-count requests; perfkit caps one at 60 s",
        lower_value=True,
    ),
    PaFlag(
        ("-p", "--measurement-interval"),
        True,
        "differs",
        "window length; perfkit's default 1000 ms (5000 through the `perf_analyzer` command)",
    ),
    PaFlag(
        ("--measurement-request-count",),
        True,
        "same",
        "count_windows: requests completed (ok) that end a window; default 50",
    ),
    PaFlag(
        ("-s", "--stability-percentage"),
        True,
        "differs",
        "a 95% confidence half-width (throughput ±s/2 %, latency ±s %), not 3 windows' spread",
    ),
    PaFlag(
        ("--percentile",),
        True,
        "same",
        "latency percentile for stability and -l; -1 for none; others outside (0, 100) refused (_flag_checks); the"
        " `perf_analyzer` command reads it as perf_analyzer 2.60 (an integer, 1-99)",
    ),
    PaFlag(
        ("--warmup-request-count",),
        True,
        "same",
        "requests sent before measuring (>= 0; one load value only, as perf_analyzer)",
    ),
    PaFlag(
        ("--request-count",),
        True,
        "same",
        "one window of exactly N requests, one concurrency or rate value (N >= it), as perf_analyzer",
    ),
    PaFlag(
        ("-r", "--max-trials"),
        True,
        "differs",
        "max windows per level; perfkit's default 30 (10 through `perf_analyzer`); an unstable level is "
        "reported, flagged (exit 2 under PERFKIT_EXIT_CODES=perf_analyzer)",
    ),
    PaFlag(("--concurrency-range",), True, "same", "closed loop: start[:end[:step]]"),
    PaFlag(
        ("--periodic-concurrency-range",),
        True,
        "differs",
        "decoupled models, -i grpc --streaming, with --profile-export-file: START requests, STEP more each time "
        "every request had --request-period responses; never past END in all (perf_analyzer overshoots when "
        "START != STEP); START 0 refused (perf_analyzer waits forever)",
    ),
    PaFlag(
        ("--session-concurrency",),
        True,
        "refused",
        "multi-turn sessions of the OpenAI service kind; perfkit sends single-turn requests (--concurrency-range)",
    ),
    PaFlag(
        ("--request-period",),
        True,
        "same",
        "responses per request (the flag-only final one counted, as perf_analyzer) before STEP more start",
    ),
    PaFlag(
        ("--request-parameter",),
        True,
        "differs",
        "gRPC: set in every request's parameters as perf_analyzer 2.60 sets them (string; int read by std::stoi; bool"
        " true only for 'true'; other types not sent, said on stderr); an int 2.60 would abort on at its first request"
        " is refused before measuring; `perfkit profile` also sends them over HTTP (JSON `parameters`), where the"
        " `perf_analyzer` command refuses as 2.60",
    ),
    PaFlag(("--request-rate-range",), True, "differs", "open loop; late and dropped sends counted"),
    PaFlag(("--request-distribution",), True, "same", "constant or poisson", lower_value=True),
    PaFlag(("-l", "--latency-threshold"), True, "differs", "on --percentile if given, else the average (ms)"),
    PaFlag(
        ("--binary-search",), False, "same", "with -l > 0 and a range START:END (refused otherwise, as perf_analyzer)"
    ),
    PaFlag(("--request-intervals",), True, "same", "file of gaps in µs"),
    PaFlag(("--fixed-schedule",), False, "same", "replays --input-data timestamps"),
    PaFlag(("--max-threads",), True, "accepted", "perfkit's client is asynchronous (no thread per request)"),
    PaFlag(("--num-of-sequences",), True, "same", "open loop: live sequences"),
    PaFlag(("--sequence-length",), True, "same", "requests per sequence; <= 0: perf_analyzer's warning, its default"),
    PaFlag(("--sequence-length-variation",), True, "same", "± percent (>= 0)"),
    PaFlag(("--sequence-id-range",), True, "same", "start[:end] correlation IDs"),
    PaFlag(("--serial-sequences",), False, "same", "one request in flight per sequence"),
    PaFlag(
        ("--input-data",),
        True,
        "differs",
        "zero, random, a JSON file, a directory (one file per input; other files ignored, as 2.41 and Triton's QA"
        " scripts expect, where 2.60 refuses them), or repeated (streams appended); validation_data checked before"
        " measuring",
    ),
    PaFlag(("-b",), True, "same", "batch size"),
    PaFlag(("--shape",), True, "same", "NAME:D1,D2 for variable dims"),
    PaFlag(("--string-data",), True, "same", "the string every BYTES element of generated data holds"),
    PaFlag(("--string-length",), True, "same", "length of random strings"),
    PaFlag(
        ("--shared-memory",),
        True,
        "same",
        "none, system, cuda; output regions sized for the batch",
        lower_value=True,
    ),
    PaFlag(("--output-shared-memory-size",), True, "same", "bytes per output whose size is not fixed"),
    PaFlag(
        ("--input-tensor-format",),
        True,
        "same",
        "binary or json, over HTTP (gRPC is always binary)",
        lower_value=True,
    ),
    PaFlag(
        ("--output-tensor-format",),
        True,
        "same",
        "binary or json, over HTTP (gRPC is always binary)",
        lower_value=True,
    ),
    PaFlag(("-i",), True, "same", "http or grpc (any case)", lower_value=True),
    PaFlag(("-a", "--async"), False, "accepted", "perfkit is always asynchronous"),
    PaFlag(
        ("--sync",),
        False,
        "accepted",
        "perfkit is always asynchronous: the same load, fewer threads; with -a refused, as perf_analyzer",
    ),
    PaFlag(
        ("--streaming",),
        False,
        "differs",
        "gRPC bidirectional stream; `perfkit profile` also streams over HTTP (generate_stream), the `perf_analyzer`"
        " command refuses it over HTTP as perf_analyzer 2.60",
    ),
    PaFlag(
        ("-H",),
        True,
        "same",
        "a header on every HTTP infer request, streamed ones too; gRPC metadata on unary calls and the stream "
        "(perf_analyzer's docs say ignored for gRPC, its client code sends them)",
    ),
    PaFlag(
        ("--grpc-compression-algorithm",),
        True,
        "same",
        "none, gzip or deflate, -i grpc only: unary requests compressed once, before the hot path; streamed ones each",
        lower_value=True,
    ),
    PaFlag(("--grpc-method",), True, "refused", "dynamic_grpc service kind only; " + _DYN),
    PaFlag(("--proto",), True, "refused", "dynamic_grpc service kind only; " + _DYN),
    PaFlag(("--endpoint",), True, "same", "OpenAI service kind: the path posted to (default v1/chat/completions)"),
    PaFlag(("-u",), True, "same", "server URL (without -u `perfkit profile` launches the bundled server)"),
    PaFlag(
        ("--ssl-grpc-use-ssl",),
        False,
        "same",
        "gRPC over TLS (ALPN h2), unary requests; streamed/sequence models refused. perfkit's metadata calls"
        " go over HTTP: plain unless --admin-url is https://",
    ),
    PaFlag(("--ssl-grpc-root-certifications-file",), True, "same", "gRPC TLS: PEM CAs to trust"),
    PaFlag(("--ssl-grpc-private-key-file",), True, "same", "gRPC TLS: PEM client key"),
    PaFlag(("--ssl-grpc-certificate-chain-file",), True, "same", "gRPC TLS: PEM client certificate chain"),
    PaFlag(
        ("--ssl-https-verify-peer",),
        True,
        "same",
        "HTTPS (an https:// -u, for the load and perfkit's metadata calls): 0 or 1 (default)",
    ),
    PaFlag(("--ssl-https-verify-host",), True, "differs", "0 no host check; 1 and 2 (default) check it"),
    PaFlag(("--ssl-https-ca-certificates-file",), True, "same", "HTTPS: PEM CAs to trust"),
    PaFlag(("--ssl-https-client-certificate-file",), True, "same", "HTTPS: PEM client certificate"),
    PaFlag(
        ("--ssl-https-client-certificate-type",),
        True,
        "differs",
        "PEM only; DER refused (convert with openssl)",
    ),
    PaFlag(("--ssl-https-private-key-file",), True, "same", "HTTPS: PEM client key"),
    PaFlag(
        ("--ssl-https-private-key-type",),
        True,
        "differs",
        "PEM only; DER refused (convert with openssl)",
    ),
    PaFlag(("--triton-server-directory",), True, "refused", _CAPI),
    PaFlag(
        ("--model-repository",),
        True,
        "differs",
        "the repository perfkit's launched server serves (perf_analyzer: C API only)",
    ),
    PaFlag(("--collect-metrics",), False, "same", "server GPU metrics during the run"),
    PaFlag(
        ("--metrics-url",),
        True,
        "same",
        "metrics endpoint; refused without --collect-metrics, as perf_analyzer 2.60",
    ),
    PaFlag(
        ("--metrics-interval",),
        True,
        "same",
        "ms between scrapes (> 0); refused without --collect-metrics, as perf_analyzer",
    ),
    PaFlag(("-f",), True, "differs", "same columns and units; Client Send/Recv are 0"),
    PaFlag(
        ("--profile-export-file",),
        True,
        "same",
        "every request's send and response timestamps per level, in perf_analyzer's JSON layout",
    ),
    PaFlag(
        ("--verbose-csv",),
        False,
        "accepted",
        "`perfkit profile`'s -f CSV always has the verbose columns; the `perf_analyzer` command writes them only with"
        " it (Avg latency only without --percentile), as perf_analyzer",
    ),
    PaFlag(("--enable-mpi",), False, "refused", "MPI is not supported; spread load with --ray"),
    PaFlag(
        ("--trace-level",),
        True,
        "refused",
        "`perfkit profile`: `OFF` accepted, others refused (" + _TRACE + "); the `perf_analyzer` command: " + _TRACE_PA,
        refused_values=(("*", _TRACE),),
        noop_values=("off",),
        lower_value=True,
    ),
    PaFlag(
        ("--trace-rate",),
        True,
        "refused",
        "`perfkit profile`: " + _TRACE + "; the `perf_analyzer` command: " + _TRACE_PA,
        refused_values=(("*", _TRACE),),
    ),
    PaFlag(
        ("--trace-count",),
        True,
        "refused",
        "`perfkit profile`: " + _TRACE + "; the `perf_analyzer` command: " + _TRACE_PA,
        refused_values=(("*", _TRACE),),
    ),
    PaFlag(
        ("--log-frequency",),
        True,
        "refused",
        "`perfkit profile`: " + _TRACE + "; the `perf_analyzer` command: " + _TRACE_PA,
        refused_values=(("*", _TRACE),),
    ),
    PaFlag(("--version",), False, "refused", "use `perfkit --version` (the `perf_analyzer` command prints it)"),
    PaFlag(("--data-directory",), True, "mapped", "→ --input-data DIR"),
    PaFlag(("-c",), True, "refused", "deprecated dynamic concurrency; use --concurrency-range 1:N with -l"),
    PaFlag(("-d",), False, "refused", "deprecated dynamic concurrency; use --concurrency-range 1:N with -l"),
    PaFlag(("-t",), True, "mapped", "→ --concurrency-range N"),
    PaFlag(("-z",), False, "mapped", "→ --input-data zero"),
)

BY_SPELLING: dict[str, PaFlag] = {s: f for f in PA_FLAGS for s in f.spellings}


def render_markdown() -> str:
    """The table of perf_analyzer's flags and perfkit's handling, for docs/reference/perf-analyzer-flags.md."""
    lines = ["| perf_analyzer flag | perfkit | what perfkit does |", "|---|---|---|"]
    for f in PA_FLAGS:
        names = " ".join(f"`{s}`" for s in f.spellings)
        lines.append(f"| {names} | {f.status} | {f.note} |")
    return "\n".join(lines)
