"""The `perf_analyzer` command (extra `perfkit[pa-compat]`): `perfkit profile` with perf_analyzer's defaults.

Tools and scripts that shell out to `perf_analyzer` (model_analyzer, genai-perf, CI scripts) run
on perfkit unchanged: where the two differ by default, this command takes perf_analyzer's side —
5 s windows (`-p 5000`), 10 of them at most (`-r 10`),
stability judged on throughput and latency only (`--tail-percentiles ''`), the server at localhost:8000 (HTTP) or
localhost:8001 (gRPC) rather than a launched one, and perf_analyzer's exit codes
(PERFKIT_EXIT_CODES=perf_analyzer: 0, 2 when a level did not stabilise, 99 otherwise). A flag
given on the command line always wins.
"""

from __future__ import annotations

import os
import sys

from perfkit.cli._pa_compat import EXIT_CODES_ENV, PA_GENERIC_ERROR, normalize_argv
from perfkit.errors import UsageError

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
    if "--tail-percentiles" not in given:
        # perf_analyzer's stability looks at throughput and latency only, not at a tail's sample count
        out += ["--tail-percentiles", ""]
    if not given & {"-u", "--url", "--launch-mode", "--model-repository"}:
        grpc = any(a in ("-i", "--protocol") and b == "grpc" for a, b in zip(norm, norm[1:]))
        out += ["-u", "localhost:8001" if grpc else "localhost:8000"]
    return out


def main(argv: list[str] | None = None) -> int:
    """Console entry point `perf_analyzer`."""
    from perfkit import __version__
    from perfkit.cli import main as perfkit_main

    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--version"]:
        print(f"perf_analyzer (perfkit {__version__})")
        return 0
    try:
        defaults = pa_defaults(args)
    except UsageError as err:
        print(f"perfkit: error: {err.one_line()}", file=sys.stderr)
        return PA_GENERIC_ERROR
    before = os.environ.get(EXIT_CODES_ENV)
    os.environ[EXIT_CODES_ENV] = before or "perf_analyzer"  # restored after: main() may run in-process
    try:
        return perfkit_main(["profile", *defaults, *args])
    finally:
        if before is None:
            os.environ.pop(EXIT_CODES_ENV, None)


if __name__ == "__main__":
    sys.exit(main())
