"""A pipeline's (or a mix's) subject puts a step's config on the server only where that server is
not known to serve it already. What one server serves says nothing of another's: a subject reused
on a fresh server (a grid re-measured after the tune) skipped every step the tune had last served
there and measured the originals instead."""

from __future__ import annotations

from types import SimpleNamespace

from perfkit.tuner import _pipeline
from perfkit.tuner._subject_pipeline import PipelineSubject


def _subject() -> tuple[SimpleNamespace, list[tuple[object, str, str]]]:
    put: list[tuple[object, str, str]] = []
    steps = [SimpleNamespace(model=m, original_text=f"{m} original\n", config_path=f"{m}/config.pbtxt")
             for m in ("a", "b")]  # fmt: skip
    route = SimpleNamespace(serve=lambda server, model, path, text: put.append((server, model, text)))
    subject = SimpleNamespace(pipeline=SimpleNamespace(searched_steps=steps, kind="mix"), route=route, _served={},
                              _served_on=None)  # fmt: skip
    return subject, put


def test_a_step_is_served_again_only_where_that_server_is_not_known_to_serve_it():
    subject, put = _subject()
    first, other = object(), object()
    text = _pipeline.bundle({"a": "a batched\n", "b": "b batched\n"})
    PipelineSubject.serve(subject, first, text)  # type: ignore[arg-type]  # a stand-in with the subject's fields
    assert [(m, t) for _, m, t in put] == [("a", "a batched\n"), ("b", "b batched\n")]
    put.clear()
    PipelineSubject.serve(subject, first, _pipeline.bundle({"a": "a batched\n", "b": "b alone\n"}))  # type: ignore[arg-type]  # as above
    assert [(m, t) for _, m, t in put] == [("b", "b alone\n")]  # a: known to be served there
    put.clear()
    # A fresh server serves what it loaded, not what the first one was given: every step is put
    PipelineSubject.serve(subject, other, _pipeline.bundle({"a": "a batched\n", "b": "b alone\n"}))  # type: ignore[arg-type]  # as above
    assert [(s, m) for s, m, _ in put] == [(other, "a"), (other, "b")]
