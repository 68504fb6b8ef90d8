"""perfkit's command line: a thin shell over the stages. Imported by nothing."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

import click

from perfkit import __version__
from perfkit.cli import _signals
from perfkit.errors import ExitCode, PerfkitError, ServerError

_COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module, help shown in the group listing)
    "serve": ("perfkit.cli.serve", "Run a Triton server (local, docker) in the foreground."),
    "profile": ("perfkit.cli.profile", "Measure throughput and latency under load (perf_analyzer's flags)."),
    "tune": ("perfkit.cli.tune", "Search model configs for the most throughput within a latency budget."),
    "plan": (
        "perfkit.cli.plan",
        "Replicas for a target rate within a latency budget, from a tune/profile record.",
    ),
    "report": ("perfkit.cli.report", "Write a self-contained HTML report from run records."),
    "gate": ("perfkit.cli.gate", "Fail CI when performance regresses against a baseline."),
    "history": ("perfkit.cli.history", "Each metric's history in the results store, with its change points."),
    "baseline": ("perfkit.cli.baseline", "Save, show and list baselines in the results store."),
    "run": ("perfkit.cli.run", "Run a whole campaign from a sweep file (serve, profile, tune, report, gate)."),
}


class _LazyGroup(click.Group):
    """Imports a command's module only when that command runs (fast --help, light start-up)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS:
            return None
        module = __import__(_COMMANDS[cmd_name][0], fromlist=["command"])
        return module.command  # type: ignore[no-any-return]  # every command module defines command as a click.Command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, help_) for name, (_, help_) in _COMMANDS.items()])


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="perfkit")
@click.option("--traceback", is_flag=True, help="Show the Python stack for expected errors too.")
@click.pass_context
def cli(ctx: click.Context, traceback: bool) -> None:
    """perfkit: measure, tune and gate NVIDIA Triton Inference Server deployments.

    \b
    Exit codes:
      0  success             4  server error (start, unreachable, died)
      1  internal error      5  measurement failed part-way (partial results saved)
      2  usage error         10 gate: regression   11 gate: inconclusive   12 gate: invalid
      3  bad input           13 history: a change point toward worse (--fail-on-change)
                             130 interrupted (Ctrl-C / SIGTERM)
    PERFKIT_EXIT_CODES=perf_analyzer: perf_analyzer's codes instead (0; 2 a level did not
    stabilise; 99 any error), as the `perf_analyzer` command uses.
    """
    ctx.ensure_object(dict)
    ctx.obj["traceback"] = traceback


def main(argv: list[str] | None = None) -> int:
    """Console entry point: runs the CLI and maps errors to documented exit codes."""
    args = sys.argv[1:] if argv is None else argv
    # SIGINT/SIGTERM become KeyboardInterrupt for every command, also in background jobs (see _signals)
    with _signals.handled():
        code = _run(args)
    from perfkit.cli._pa_compat import pa_exit_codes, to_pa_exit_code

    return to_pa_exit_code(code) if pa_exit_codes() else code


@contextlib.contextmanager
def warnings_logged() -> Iterator[None]:
    """A library's warnings (optuna's, numpy's) go to logging ("py.warnings"), not raw to the
    terminal: the library logs, the CLI prints only its lines."""
    logging.captureWarnings(True)
    quiet = logging.NullHandler()  # a handler: logging's last resort (stderr) is not used for them
    logger = logging.getLogger("py.warnings")
    logger.addHandler(quiet)
    try:
        yield
    finally:
        logger.removeHandler(quiet)
        logging.captureWarnings(False)


def _run(args: list[str]) -> int:
    with warnings_logged():
        return _run_logged(args)


def _run_logged(args: list[str]) -> int:
    show_traceback = "--traceback" in args or os.environ.get("PERFKIT_TRACEBACK") == "1"
    try:
        # In non-standalone mode click *returns* a command's exit code instead of raising.
        rc = cli.main(args=args, prog_name="perfkit", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return int(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("perfkit: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("perfkit: interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except PerfkitError as err:
        if show_traceback:
            import traceback  # noqa: PLC0415

            traceback.print_exc()
        click.echo(f"perfkit: error: {err.one_line()}", err=True)
        if isinstance(err, ServerError) and err.log_tail:
            click.echo("--- server log (last lines) ---", err=True)
            click.echo(err.log_tail, err=True)
        return int(err.exit_code)
    return int(rc or ExitCode.OK) if isinstance(rc, int) else int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
