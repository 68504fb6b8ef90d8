"""`perfkit profile` options for an OpenAI-compatible endpoint: perf_analyzer's spelling where it has one
(--service-kind openai, --endpoint), AIPerf 0.13's where it has none (--endpoint-type, the synthetic
token lengths, --tokenizer, --extra-inputs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from perfkit.errors import UsageError
from perfkit.records import DEFAULT_INPUT_TOKENS_MEAN, ENDPOINT_PATHS, OpenAISpec


def openai_options() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator adding the OpenAI-compatible endpoint's options."""
    opts = [
        click.option(
            "--service-kind",
            type=click.Choice(["triton", "openai"], case_sensitive=False),
            default="triton",
            show_default=True,
            help="triton: Triton's KServe v2 protocol; openai: an OpenAI-compatible server at -u (Triton's OpenAI"
            " frontend, vLLM, llama.cpp...), perf_analyzer's --service-kind openai.",
        ),
        click.option(
            "--endpoint",
            default=None,
            help="OpenAI: the path posted to (default: the --endpoint-type's, v1/chat/completions for chat).",
        ),
        click.option(
            "--endpoint-type",
            type=click.Choice(sorted(ENDPOINT_PATHS)),
            default="chat",
            show_default=True,
            help="OpenAI: what the requests are (AIPerf's --endpoint-type).",
        ),
        click.option(
            "--tokenizer",
            default=None,
            metavar="DIR|FILE.gguf",
            help="OpenAI: a local Hugging Face tokenizer folder (tokenizer.json) or a GGUF model file (its own"
            " tokenizer): prompts have exactly the asked length under it. Never downloaded.",
        ),
        click.option(
            "--synthetic-input-tokens-mean",
            type=int,
            default=DEFAULT_INPUT_TOKENS_MEAN,
            show_default=True,
            help="OpenAI: prompt length in tokens (mean).",
        ),
        click.option(
            "--synthetic-input-tokens-stddev", type=float, default=0.0, show_default=True, help="... its stddev."
        ),
        click.option(
            "--output-tokens-mean",
            type=int,
            default=None,
            help="OpenAI: answer length in tokens, asked with max_tokens and ignore_eos (default: the server's).",
        ),
        click.option("--output-tokens-stddev", type=float, default=0.0, show_default=True, help="... its stddev."),
        click.option(
            "--extra-inputs",
            multiple=True,
            metavar="KEY:VALUE",
            help="OpenAI: a field of every request's body (VALUE read as JSON where it is, else a string);"
            " repeat it. E.g. ignore_eos:false, temperature:0.",
        ),
    ]

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        for opt in reversed(opts):
            f = opt(f)
        return f

    return wrap


def _extra(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    out = []
    for item in values:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise UsageError(f"--extra-inputs {item!r}: expected KEY:VALUE", hint="e.g. --extra-inputs ignore_eos:true")
        try:
            json.loads(value)
            text = value
        except ValueError:
            text = json.dumps(value)  # a plain word is a string
        out.append((key.strip(), text))
    return tuple(out)


def openai_spec_fields(kw: dict[str, Any]) -> dict[str, Any]:
    """ProfileSpec's service_kind and openai from the options above (consumes them); raises UsageError."""
    kind = str(kw.pop("service_kind") or "triton").lower()
    spec = OpenAISpec(
        endpoint_type=kw.pop("endpoint_type"),
        endpoint=(kw.pop("endpoint") or "").strip("/"),
        tokenizer=kw.pop("tokenizer") or "",
        input_tokens_mean=kw.pop("synthetic_input_tokens_mean"),
        input_tokens_stddev=kw.pop("synthetic_input_tokens_stddev"),
        output_tokens_mean=kw.pop("output_tokens_mean"),
        output_tokens_stddev=kw.pop("output_tokens_stddev"),
        extra_inputs=_extra(kw.pop("extra_inputs")),
    )
    if kind != "openai":
        if spec != OpenAISpec(endpoint_type=spec.endpoint_type) or spec.endpoint_type != "chat":
            raise UsageError("--endpoint, --tokenizer and the token-length flags are for --service-kind openai")
        return {"service_kind": "triton", "openai": None}
    if spec.input_tokens_mean < 1:
        raise UsageError(f"--synthetic-input-tokens-mean {spec.input_tokens_mean}: must be at least 1")
    if spec.output_tokens_mean is not None and spec.output_tokens_mean < 1:
        raise UsageError(f"--output-tokens-mean {spec.output_tokens_mean}: must be at least 1")
    if spec.input_tokens_stddev < 0 or spec.output_tokens_stddev < 0:
        raise UsageError("--synthetic-input-tokens-stddev / --output-tokens-stddev: must not be negative")
    return {"service_kind": "openai", "openai": spec}
