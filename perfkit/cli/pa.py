"""The `perf_analyzer` command (extra `perfkit[pa-compat]`): `perfkit profile` with perf_analyzer's defaults.

Tools and scripts that shell out to `perf_analyzer` (model_analyzer, genai-perf, CI scripts) run
on perfkit unchanged: where the two differ by default, this command takes perf_analyzer's side —
5 s windows (`-p 5000`), 10 of them at most (`-r 10`), a level ending once its last 3 windows' throughput
and latency are within -s of each other (`--stop-rule stability`), no warm-up but `--warmup-request-count`,
stability judged on throughput and latency only (`--tail-percentiles ''`), the server at localhost:8000 (HTTP) or
localhost:8001 (gRPC) rather than a launched one, and perf_analyzer's exit codes
(PERFKIT_EXIT_CODES=perf_analyzer: 0, 2 when a level did not stabilise, 99 otherwise). A flag
given on the command line always wins.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from perfkit.cli._pa_compat import EXIT_CODES_ENV, PA_GENERIC_ERROR, normalize_argv
from perfkit.cli._pa_verify import PaTraceSettings, verify_like_pa
from perfkit.errors import PerfkitError

PA_MEASUREMENT_INTERVAL_MS = 5000
PA_MAX_TRIALS = 10


def pa_defaults(args: list[str]) -> list[str]:
    """The flags to put before `args` for perf_analyzer's defaults; raises UsageError (refused flags)."""
    norm, _ = normalize_argv(args)
    given = set(norm)
    out = []
    if not given & {"-p", "--measurement-interval"}:
        out += ["-p", str(PA_MEASUREMENT_INTERVAL_MS)]
    if not given & {"-r", "--max-trials"}:
        out += ["-r", str(PA_MAX_TRIALS)]
    if "--stop-rule" not in given:
        # a level ends by perf_analyzer's rule: its last 3 windows within -s of each other
        out += ["--stop-rule", "stability"]
    if "--warmup" not in given:
        # perf_analyzer warms up by --warmup-request-count only (none by default): its first windows are the
        # warm-up, and its rule looks at the last three
        out += ["--warmup", "0"]
    if "--tail-percentiles" not in given:
        # perf_analyzer's stability looks at throughput and latency only, not at a tail's sample count
        out += ["--tail-percentiles", ""]
    if not given & {"-u", "--url", "--launch-mode", "--model-repository"}:
        grpc = any(a in ("-i", "--protocol") and b == "grpc" for a, b in zip(norm, norm[1:]))
        out += ["-u", "localhost:8001" if grpc else "localhost:8000"]
    return out


def apply_trace_settings(trace: PaTraceSettings, args: list[str]) -> None:
    """Set the server's global trace settings, as perf_analyzer 2.60 does before it measures: its client
    backend's UpdateTraceSettings with no model name, over the protocol of the run (HTTP POST
    /v2/trace/setting, or gRPC's TraceSetting), at -u (perf_analyzer's src/client_backend/triton/
    triton_client_backend.cc, TritonClientBackend::Create). Left set afterwards, as perf_analyzer leaves
    them. Raises ServerError with the server's words (unreachable, or the server refused the settings)."""
    from tritonclient.utils import InferenceServerException

    from perfkit.errors import ServerError

    norm, _ = normalize_argv(args)
    opts = dict(zip(norm, norm[1:]))
    grpc = opts.get("-i", opts.get("--protocol")) == "grpc"
    url = opts.get("-u") or opts.get("--url") or ("localhost:8001" if grpc else "localhost:8000")
    try:
        if grpc:
            import tritonclient.grpc as client_grpc

            with client_grpc.InferenceServerClient(url) as c:
                c.update_trace_settings(model_name=None, settings=trace.body())
        else:
            import tritonclient.http as client_http

            with client_http.InferenceServerClient(url, network_timeout=30.0) as c:
                c.update_trace_settings(model_name=None, settings=trace.body())
    except InferenceServerException as err:
        raise ServerError(f"failed to update the server's trace settings at {url}: {err.message()}") from None
    except OSError as err:
        raise ServerError(f"failed to update the server's trace settings at {url}: {err}") from None


# perfkit's -f CSV ends with the columns perf_analyzer writes only with --verbose-csv ("Avg latency" only
# without --percentile): src/report_writer.cc, ReportWriter::GenerateReport, unchanged from 2.41 to 2.60
_VERBOSE_COLUMNS = ("Avg latency", "request/response", "response wait")


def pa_csv_columns(path: Path, *, verbose: bool, percentile: bool) -> None:
    """Keep the -f CSV's columns perf_analyzer 2.60 writes for these flags (a no-op where none was written)."""
    import csv

    if not path.is_file():
        return
    rows = list(csv.reader(path.read_text().splitlines()))
    if not rows:
        return
    drop = set(_VERBOSE_COLUMNS) if not verbose else ({"Avg latency"} if percentile else set())
    keep = [i for i, name in enumerate(rows[0]) if name not in drop]
    path.write_text("".join(",".join(row[i] for i in keep if i < len(row)) + "\n" for row in rows))


def main(argv: list[str] | None = None) -> int:
    """Console entry point `perf_analyzer`."""
    from perfkit import __version__
    from perfkit.cli import main as perfkit_main

    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--version"]:
        print(f"perf_analyzer (perfkit {__version__})")
        return 0
    try:
        # what perf_analyzer 2.60 refuses as it reads its command line is refused first, in its words
        args, trace = verify_like_pa(args)
        defaults = pa_defaults(args)
        if trace is not None:
            apply_trace_settings(trace, [*defaults, *args])
    except PerfkitError as err:
        print(f"perfkit: error: {err.one_line()}", file=sys.stderr)
        return PA_GENERIC_ERROR
    before = os.environ.get(EXIT_CODES_ENV)
    os.environ[EXIT_CODES_ENV] = before or "perf_analyzer"  # restored after: main() may run in-process
    try:
        rc = perfkit_main(["profile", *defaults, *args])
        norm, _ = normalize_argv(args)
        csv = dict(zip(norm, norm[1:])).get("-f") or dict(zip(norm, norm[1:])).get("--latency-report-file")
        if csv:
            pa_csv_columns(Path(csv), verbose="--verbose-csv" in args, percentile="--percentile" in norm)
        return rc
    finally:
        if before is None:
            os.environ.pop(EXIT_CODES_ENV, None)


if __name__ == "__main__":
    sys.exit(main())
