"""A tune setting's declaration: its [tune] key and flags, how a value is read, its unit, help and
check, and the field of the trial's measurement settings (TrialLoadSettings) it feeds. Each field of
TuneSettings carries one (`setting(default, ...)`), so a setting's default is written once, on its
field; `perfkit tune`'s options, the [tune] table's parser, the checks and the trial's settings are
derived from these declarations (as `perfkit profile`'s flags are from ProfileSpec)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.errors import InputError, UsageError
from perfkit.records import Budget
from perfkit.units import parse_bytes, parse_duration_s

# How a value of the [tune] table or a flag is read: (value, key, source, named) -> the field's value,
# `named` being how errors name it (--flag when given as one, else "<source> key").
Parse = Callable[[Any, str, str, str], Any]


@dataclass(frozen=True)
class Kind:
    """How a setting's value is read, and the type its flag takes (None: text)."""

    parse: Parse
    flag_type: type | None = None


def _number(conv: Callable[[Any], Any], what: str) -> Parse:
    def parse(value: Any, key: str, source: str, named: str) -> Any:
        try:
            return conv(value)
        except (TypeError, ValueError):
            raise InputError(f"{source}: {key} = {value!r} is not {what}") from None

    return parse


def _tolerance(value: Any, key: str, source: str, named: str) -> Any:
    from perfkit.tuner._accuracy import parse_max_output_diff

    return parse_max_output_diff(str(value))


def _goodput(value: Any, key: str, source: str, named: str) -> Any:
    from perfkit.measure import parse_goodput  # the SLOs' syntax is the profiler's

    return parse_goodput(value)


INT = Kind(_number(int, "a number"), int)
FLOAT = Kind(_number(float, "a number"), float)
REPEATS = Kind(_number(int, "a number of repeats"), int)
TEXT = Kind(lambda value, key, source, named: str(value))
DURATION_S = Kind(lambda value, key, source, named: parse_duration_s(value, what=named))  # '5s', '10m'
BYTES = Kind(lambda value, key, source, named: parse_bytes(value))  # '8GiB'
TOLERANCE = Kind(_tolerance)  # --max-output-diff: 1e-3, abs=X,rel=Y, off
GOODPUT_MS = Kind(_goodput)  # 'ttft:200ms,itl:20ms'
FILE = Kind(lambda value, key, source, named: Path(value), Path)  # a file that exists


@dataclass(frozen=True)
class Setting:
    """One tune setting, declared once. `field` and `default` are its TuneSettings field's (filled in
    by declarations()); a setting without `key` is set only through the Python API."""

    key: str | None = None  # the [tune] table's key, and the settings parser's (None: API only)
    flags: tuple[str, ...] = ()  # `perfkit tune`'s spellings, e.g. ("-i", "--protocol")
    kind: Kind = TEXT
    help: str = ""
    unit: str = ""  # of the field's value, shown beside its default (ms, s, req/s)
    choices: tuple[str, ...] = ()
    minimum: int | None = None  # checked on construction: "--flag must be at least N"
    checked_choices: bool = False  # a value outside `choices` is refused on construction
    # The field's default as `perfkit tune --help` shows it where the default is decided elsewhere
    # (None: the default itself; "": none shown).
    default_text: str | None = None
    flag_only: bool = False  # only `perfkit tune` gives it (not a [tune] key)
    required: bool = False  # the table or the command line must give it
    trial_load: str | None = None  # the TrialLoadSettings field it feeds, as it is (see trial_load_fields)
    field: str = ""
    default: Any = None

    @property
    def flag(self) -> str:
        """How errors name it: its long flag."""
        return self.flags[-1] if self.flags else "--" + self.field.replace("_", "-")

    def shown_default(self) -> str:
        """The default `perfkit tune --help` shows ("" for none)."""
        if self.default_text is not None:
            return self.default_text
        if self.default is None or self.default == {}:
            return ""
        text = f"{self.default:g}" if isinstance(self.default, float) else str(self.default)
        return f"{text} {self.unit}" if self.unit else text

    def check(self, value: Any) -> None:
        """The declared checks of a value (the field's own; checks across fields are TuneSettings')."""
        if self.minimum is not None and value is not None and value < self.minimum:
            raise UsageError(f"{self.flag} must be at least {self.minimum}")
        if self.checked_choices and value is not None and value not in self.choices:
            *first, last = self.choices
            raise UsageError(f"{self.flag} {value!r}: choose {', '.join(first)} or {last}")


def setting(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, **decl: Any) -> Any:
    """A TuneSettings field with its declaration (Setting's fields as keywords)."""
    meta = {"setting": Setting(**decl)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def trial_load_field(**decl: Any) -> Any:
    """A TuneSettings field without a default that feeds the trial's settings (trial_load=...)."""
    return dataclasses.field(metadata={"setting": Setting(**decl)})


def declarations(cls: Any) -> tuple[Setting, ...]:
    """The declared settings of a dataclass, in field order, with their field names and defaults."""
    out = []
    for f in dataclasses.fields(cls):
        decl = f.metadata.get("setting")
        if decl is None:
            continue
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        out.append(dataclasses.replace(decl, field=f.name, default=None if default is dataclasses.MISSING else default))
    return tuple(out)


def trial_load_fields(settings: Any, decls: Sequence[Setting]) -> dict[str, Any]:
    """The TrialLoadSettings fields the declared settings feed as they are (a dict copied)."""
    out = {}
    for d in decls:
        if d.trial_load is not None:
            value = getattr(settings, d.field)
            out[d.trial_load] = dict(value) if isinstance(value, dict) else value
    return out


# The budget's settings: parsed by parse_budget and TuneSettings.from_mapping, not fields of
# TuneSettings (the percentile's default is Budget's).
_BUDGET_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Budget)}
BUDGET_SETTINGS = (
    Setting(
        key="latency_budget",
        flags=("--latency-budget",),
        required=True,
        field="latency_budget",
        help="Budget for the percentile: end-to-end latency (20ms, 0.5s, 800us), or for a decoupled model"
        " time to first token (ttft:300ms) or inter-token latency (itl:20ms). With several -m: each model's"
        " (model_a:20ms,model_b:50ms), or one for all.",
    ),
    Setting(
        key="percentile",
        flags=("--percentile",),
        kind=FLOAT,
        field="percentile",
        default=_BUDGET_DEFAULTS["percentile"],
        help="Percentile held to the budget.",
    ),
    Setting(
        key="max_error_rate",
        flags=("--max-error-rate",),
        kind=FLOAT,
        field="max_error_rate",
        default=_BUDGET_DEFAULTS["max_error_rate"],
        help="Error budget: the share of requests the server may reject (a bounded queue, a queue timeout),"
        " e.g. 0.05 or 5%, with the load still counted; its throughput counts successes only. Above 0, the"
        " queue policy (max_queue_size, queue timeouts) is searched.",
    ),
)
