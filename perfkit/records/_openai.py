"""An OpenAI-compatible endpoint's part of a profile: what is sent (OpenAISpec) and what the server said
it received (WorkloadCheck, per level)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EndpointType = Literal["chat", "completions", "embeddings"]
# The path each endpoint type posts to where --endpoint is not given (OpenAI's API reference)
ENDPOINT_PATHS: dict[str, str] = {
    "chat": "v1/chat/completions",
    "completions": "v1/completions",
    "embeddings": "v1/embeddings",
}
# AIPerf 0.13's defaults for synthetic prompts (--synthetic-input-tokens-mean 550, stddev 0;
# --num-dataset-entries 100): perfkit's, so a run without the flags sends what AIPerf would
DEFAULT_INPUT_TOKENS_MEAN = 550
DEFAULT_PROMPT_COUNT = 100
# A level's mean input or output length the server reported (usage) may differ from what was sent by
# this much (relative) or USAGE_TOLERANCE_TOKENS, whichever is larger, before it is a mismatch
USAGE_TOLERANCE_REL = 0.05
USAGE_TOLERANCE_TOKENS = 1.0


@dataclass(frozen=True)
class OpenAISpec:
    """What a profile of an OpenAI-compatible endpoint sends (perf_analyzer's and AIPerf's flags).

    Prompts are synthetic, each exactly its drawn length under `tokenizer` (a local Hugging Face
    tokenizer folder or tokenizer.json); lengths are drawn from normal distributions (mean, stddev),
    at least 1. An output length (output_tokens_mean) is asked with max_tokens and ignore_eos.
    """

    endpoint_type: EndpointType = "chat"
    endpoint: str = ""  # the path posted to; "" the endpoint type's (ENDPOINT_PATHS)
    tokenizer: str = ""
    input_tokens_mean: int = DEFAULT_INPUT_TOKENS_MEAN
    input_tokens_stddev: float = 0.0
    output_tokens_mean: int | None = None  # None: the server decides how long each answer is
    output_tokens_stddev: float = 0.0
    # AIPerf's --extra-inputs: (key, JSON text of the value) merged into every request's body last
    extra_inputs: tuple[tuple[str, str], ...] = ()
    prompt_count: int = DEFAULT_PROMPT_COUNT  # distinct prompts, sent in turn

    @property
    def path(self) -> str:
        """The request path, with its leading slash."""
        return "/" + (self.endpoint or ENDPOINT_PATHS[self.endpoint_type]).lstrip("/")


@dataclass(frozen=True)
class WorkloadCheck:
    """A level's requests as sent, against what the server reported receiving (each response's `usage`).

    sent_*: means over the level's requests under the tokenizer (output: the max_tokens asked over the
    prompts, None where none was); reported_*: means over the requests whose answer held usage (None where none did).
    mismatch: a warning, "" when every reported mean is within the tolerance of what was sent.
    """

    requests: int
    sent_input_tokens_mean: float | None  # None: not known (a file's request bodies without --tokenizer)
    sent_output_tokens_mean: float | None
    reported_requests: int
    reported_input_tokens_mean: float | None
    reported_output_tokens_mean: float | None
    tolerance_rel: float = USAGE_TOLERANCE_REL
    mismatch: str = ""
