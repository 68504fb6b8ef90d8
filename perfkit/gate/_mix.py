"""Traffic-mix runs in the gate: one run of a mix is judged as the whole mix and as each model.

A mix record (`spec.mix`) becomes views: the whole mix (its levels as measured), named
`mix A:3,B:1`, and one per model (its share of each level), named `A in mix A:3,B:1`. Views
pair with the same views of the other side's runs, so a model is judged only against the same
model in the same mix. A threshold scoped to a model (`A:p99:+10%`) applies to that model's
views (in a mix or measured alone); unscoped thresholds apply to every view.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from perfkit.records import RunRecord

IN_MIX = " in mix "


def mix_views(records: Sequence[RunRecord]) -> list[RunRecord]:
    """Each record as itself, or a mix record as its whole-mix view and one view per model."""
    out: list[RunRecord] = []
    for rec in records:
        if not rec.spec.mix:
            out.append(rec)
            continue
        label = rec.spec.mix_label
        out.append(dataclasses.replace(rec, model=dataclasses.replace(rec.model, name=f"mix {label}")))
        for index, (model, _) in enumerate(rec.spec.mix):
            levels = tuple(lv.models[index].result for lv in rec.levels if len(lv.models) > index)
            view_model = dataclasses.replace(rec.model, name=f"{model}{IN_MIX}{label}", config={})
            out.append(dataclasses.replace(rec, model=view_model, levels=levels))
    return out


def threshold_scope(view_name: str) -> str:
    """The model a view's scoped thresholds are for: the model itself, or '' for a whole mix."""
    if view_name.startswith("mix "):
        return ""
    return view_name.split(IN_MIX, 1)[0]
