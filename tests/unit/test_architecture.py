"""Holds the one-way data flow between perfkit's stages (see README "Design").

Each top-level module or package of perfkit sits in a layer; a module may import
its own stage and lower layers only. Stages in one layer (tuner, gate) do not
import each other. Nothing imports the CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import perfkit
from perfkit.errors import ExitCode

PKG = Path(perfkit.__file__).parent

LAYERS: list[set[str]] = [
    {"errors"},
    {"units"},  # unit parsers: '20ms', '8GiB', '20k/s' read one way by every command
    {"objectives"},  # the objective registry: records rank a tune's trials with it
    {"records"},  # with the budget (records/_budget): measure, the tuner's verdicts and capacity read it
    {"changepoints"},  # e-divisive over a series: the level loop's windows, the gate, history
    {"server"},
    {"schedule"},
    {"recorder"},
    {"loadgen"},
    {"measure"},
    {"distributed"},  # measure's level loop spread over Ray workers; the tuner's --ray mode builds on it
    {"store"},
    {"predict"},  # pure: a simulator of the batcher and its calibration (numpy only); the tuner searches with it
    {"tuner", "gate", "capacity"},  # capacity: replicas for a target rate, analysis over records
    {
        "history",
        "live",
    },  # history: the store's runs over time (uses the gate's noise model); live: progress -> Prometheus
    {"report"},
    {"campaign"},
    {"cli"},
    {"__main__"},
]
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}


def _stage(module_path: Path) -> str:
    rel = module_path.relative_to(PKG)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "perfkit" and len(parts) > 1:
                found.add(parts[1])
    return found


def _modules() -> list[Path]:
    return [p for p in PKG.rglob("*.py") if p.name != "__init__.py" or p.parent != PKG]


def test_every_stage_has_a_layer():
    stages = {_stage(p) for p in _modules()}
    assert stages <= set(LAYER_OF), f"add these to LAYERS: {sorted(stages - set(LAYER_OF))}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_imports_flow_one_way(path: Path):
    stage = _stage(path)
    for imported in _imports(path):
        if imported in (stage, "__version__"):
            continue
        assert imported in LAYER_OF, f"{path.name} imports unknown stage perfkit.{imported}"
        assert LAYER_OF[imported] < LAYER_OF[stage], (
            f"{path.relative_to(PKG)} (stage {stage}) imports perfkit.{imported}, "
            f"which is not in a lower layer: data flows one way"
        )


def test_the_layer_rule_catches_an_upward_import(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("from perfkit.cli import main\nimport perfkit.report\n")
    assert _imports(bad) == {"cli", "report"}


def test_exit_codes_are_pinned():
    assert {c.name: int(c) for c in ExitCode} == {
        "OK": 0,
        "INTERNAL": 1,
        "USAGE": 2,
        "INPUT": 3,
        "SERVER": 4,
        "MEASUREMENT": 5,
        "GATE_REGRESSION": 10,
        "GATE_INCONCLUSIVE": 11,
        "GATE_INVALID": 12,
        "HISTORY_CHANGE": 13,
        "INTERRUPTED": 130,
    }


# Analysis over records: none of these loads an optimizer, directly or through the tuner (a campaign
# without [tune], a report, `perfkit plan` must not pay optuna's import).
ANALYSIS = ("capacity", "gate", "history", "report")


@pytest.mark.parametrize("stage", ANALYSIS)
def test_analysis_stages_import_no_optimizer(stage: str):
    import subprocess
    import sys

    loaded = "sorted(m for m in sys.modules if m.split('.')[0] == 'optuna' or m.startswith('perfkit.tuner'))"
    code = f"import sys, perfkit.{stage}; print({loaded})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"importing perfkit.{stage} loads {out}"


def _absolute_imports(path: Path) -> list[tuple[str | None, list[str]]]:
    """Each absolute import of a file: (None, modules) for `import a, b`, (module, names) for
    `from module import names`."""
    out: list[tuple[str | None, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.append((None, [a.name for a in node.names]))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, [a.name for a in node.names]))
    return out


def _private_tuner_imports(path: Path) -> set[str]:
    found = set()
    for module, names in _absolute_imports(path):
        reached = names if module is None else [module] + [f"{module}.{n}" for n in names]
        found.update(n for n in reached if n.startswith("perfkit.tuner._"))
    return found


@pytest.mark.parametrize("path", sorted((PKG / "cli").rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_the_cli_imports_no_private_tuner_module(path: Path):
    assert not _private_tuner_imports(path), f"{path.relative_to(PKG)} reaches into {_private_tuner_imports(path)}"


def test_the_private_import_rule_catches_one(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("from perfkit.tuner._trial import TrialRunner\nfrom perfkit.tuner import tune\n")
    assert _private_tuner_imports(bad) == {"perfkit.tuner._trial", "perfkit.tuner._trial.TrialRunner"}


BENCHMARKS = PKG.parent / "benchmarks"


@pytest.mark.parametrize("path", sorted(BENCHMARKS.glob("*.py")), ids=lambda p: p.name)
def test_no_benchmark_imports_a_private_tuner_module(path: Path):
    """Benchmarks drive the tuner through perfkit.tuner and its public perfkit.tuner.parts."""
    assert not _private_tuner_imports(path), f"benchmarks/{path.name} reaches into {_private_tuner_imports(path)}"


SEARCH = PKG / "tuner" / "_search"


def _search_private_imports(path: Path) -> set[str]:
    """The modules of perfkit.tuner._search below its __init__ that a file imports (`from
    perfkit.tuner._search import choose` imports the package; `import _predict` from it does not)."""
    found = set()
    for module, names in _absolute_imports(path):
        if module is None:
            reached = names
        elif module == "perfkit.tuner._search":
            reached = [f"{module}.{n}" for n in names if n.startswith("_")]
        else:
            reached = [module]
        found.update(n for n in reached if n.startswith("perfkit.tuner._search."))
    return found


@pytest.mark.parametrize(
    "path",
    sorted(p for p in [*PKG.rglob("*.py"), *BENCHMARKS.glob("*.py")] if SEARCH not in p.parents),
    ids=lambda p: str(p.relative_to(PKG.parent)),
)
def test_nothing_outside_the_search_package_imports_its_private_modules(path: Path):
    """The search strategies' modules are reached through perfkit.tuner._search (its __init__) only."""
    found = _search_private_imports(path)
    assert not found, f"{path.relative_to(PKG.parent)} reaches into {found}: import from perfkit.tuner._search"


def test_the_search_package_rule_catches_one(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text(
        "from perfkit.tuner._search._predict import Predictor\nfrom perfkit.tuner._search import choose\n"
        "from perfkit.tuner import _search\n"
    )
    assert _search_private_imports(bad) == {"perfkit.tuner._search._predict"}
    worse = tmp_path / "y.py"
    worse.write_text("from perfkit.tuner._search import _predict, choose\nimport perfkit.tuner._search._kind\n")
    assert _search_private_imports(worse) == {"perfkit.tuner._search._predict", "perfkit.tuner._search._kind"}
