"""The tuner proposes no no-op point: a GPU accelerator's precision (TF-TRT, ONNX Runtime's
TensorRT) is ignored on KIND_CPU instances, so it is not searched there. Checked on the real
configs of the corpus that carry such an accelerator, as they are and with KIND_CPU instances
(the shape found in real model repositories)."""

from __future__ import annotations

import shutil
from pathlib import Path

from perfkit.server.modelconfig import config_pbtxt_sha256, parse_config
from perfkit.tuner._space import P_KIND, P_PREC, TuneSpace, apply_params, candidate_points, resolve
from tests.unit.tuner.test_corpus import CONFIGS, rows

BUDGET_US = 20_000


def _accelerated() -> list[tuple[str, str]]:
    out = []
    for r in rows():
        if "gpu_accelerator" in r.features and r.outcome == "searched":
            out.append((r.file, (CONFIGS / r.file).read_text(encoding="utf-8")))
    return out


def _with_cpu_instances(text: str) -> str:
    return text + "\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n"


def test_corpus_has_accelerated_configs():
    assert len(_accelerated()) >= 3


def test_precision_is_never_a_point_on_cpu_instances(tmp_path: Path):
    checked = 0
    for where, text in _accelerated():
        for variant in (text, _with_cpu_instances(text)):
            cfg = parse_config(variant, source=where)
            model_dir = tmp_path / f"m{checked}"
            model_dir.mkdir()
            (model_dir / "config.pbtxt").write_text(variant)
            for gpus in (0, 4):
                rs = resolve(TuneSpace(), cfg, model_dir, latency_budget_us=BUDGET_US, gpus=gpus, refuse=False)
                if rs.refused:
                    continue
                points = candidate_points(rs, limit=400)
                shas = set()
                for point in points:
                    kind = point.get(P_KIND, rs.original_params.get(P_KIND))
                    assert not (kind == "cpu" and P_PREC in point), (where, gpus, point)
                    shas.add(config_pbtxt_sha256(apply_params(cfg, point, rs)))
                # Every point is its own config: none is a no-op copy of another.
                assert len(shas) == len(points), (where, gpus)
            shutil.rmtree(model_dir)
            checked += 1
    assert checked >= 6


def test_kind_searched_with_an_accelerator_keeps_precision_for_gpu_instances(tmp_path: Path):
    where, text = next((w, t) for w, t in _accelerated() if w.endswith("ORT_TRT_config.pbtxt"))
    variant = _with_cpu_instances(text)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.pbtxt").write_text(variant)
    rs = resolve(TuneSpace(), parse_config(variant), tmp_path / "m", latency_budget_us=BUDGET_US, gpus=1)
    prec = rs.dimension(P_PREC)
    assert rs.dimension(P_KIND) is not None and prec is not None and prec.when_gpu_kind
    points = candidate_points(rs, limit=400)
    assert any(p.get(P_KIND) == "gpu" and P_PREC in p for p in points)
    assert any(p.get(P_KIND) == "cpu" for p in points)
