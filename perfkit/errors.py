"""The one error root of perfkit and the exit codes the CLI maps errors to.

This module is a leaf: it imports nothing from the package.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Documented process exit codes (pinned by tests; see docs/reference/exit-codes.md)."""

    OK = 0  # success
    INTERNAL = 1  # a bug: unexpected exception
    USAGE = 2  # bad command line (click's own code for usage errors)
    INPUT = 3  # bad input file, model config, data file, unknown model
    SERVER = 4  # server could not start, is unreachable, died, or refused what it was not started for
    MEASUREMENT = 5  # measurement ran but failed part-way (partial results saved)
    GATE_REGRESSION = 10  # gate: at least one metric regressed
    GATE_INCONCLUSIVE = 11  # gate: not enough evidence either way
    GATE_INVALID = 12  # gate: a run is not valid for comparison
    HISTORY_CHANGE = 13  # history --fail-on-change: a metric's history has a change point toward worse
    INTERRUPTED = 130  # Ctrl-C / SIGTERM, after cleanup


class PerfkitError(Exception):
    """Root of every expected perfkit error; carries its exit code."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message as printed by the CLI: one line, hint appended."""
        text = " ".join(self.message.split())
        if self.hint:
            text += f" ({' '.join(self.hint.split())})"
        return text


class UsageError(PerfkitError):
    """Options that contradict each other or are out of range."""

    exit_code = ExitCode.USAGE


class InputError(PerfkitError):
    """A file, field or value given by the user is wrong."""

    exit_code = ExitCode.INPUT


class ConfigError(InputError):
    """A config.pbtxt (or sweep file) cannot be read or is invalid."""


class CandidateRejectedError(ConfigError):
    """A candidate config breaks a rule Triton enforces; it is never sent to a server."""


class ModelNotFoundError(InputError):
    """The model is not in the repository or not known to the server."""


class ServerError(PerfkitError):
    """The Triton server could not be started, reached, or stopped."""

    exit_code = ExitCode.SERVER

    def __init__(self, message: str, *, hint: str | None = None, log_tail: str = "") -> None:
        super().__init__(message, hint=hint)
        self.log_tail = log_tail


class ServerStartError(ServerError):
    """The server exited or did not become ready during start-up."""


class PortInUseError(ServerError):
    """A port the user asked for is already taken."""


class BinaryNotFoundError(ServerError):
    """No tritonserver binary could be found."""


class ServerRefusedError(ServerError):
    """The server refused a request it was not started to allow (e.g. client shared memory on a
    Triton started without --allow-client-shm=true)."""


class ModelLoadError(ServerError):
    """The server refused to load a model (invalid config, out of memory...)."""


class CandidateNotAppliedError(ModelLoadError):
    """The server loaded a config other than the one written (a server reading another
    repository, or adjusting the config); measuring it would measure the wrong thing."""


class MeasurementError(PerfkitError):
    """A measurement failed part-way; what was measured is saved (and kept in `.record`)."""

    exit_code = ExitCode.MEASUREMENT
    record: object = None

    def with_record(self, record: object) -> MeasurementError:
        """Attach the partial run record; returns self for `raise err.with_record(rec)`."""
        self.record = record
        return self


class Interrupted(PerfkitError):
    """The user interrupted (Ctrl-C/SIGTERM); cleanup has run."""

    exit_code = ExitCode.INTERRUPTED
