"""Streaming figures of a level: TTFT, ITL, time to second token, tokens/s, goodput.

Pure over Samples carrying per-request response times (Samples.response_ns), so it is
testable with synthetic samples. A request belongs to the level as for every other
figure (by send time in closed loop, by due time in open loop).
"""

from __future__ import annotations

import numpy as np

from perfkit.errors import UsageError
from perfkit.recorder import summarize
from perfkit.records import STATUS_OK, Samples, StreamingSummary, StreamWindow

GOODPUT_KEYS = ("ttft", "itl", "latency")
# AIPerf's --goodput names (`time_to_first_token:100 inter_token_latency:3.4`, milliseconds, space-separated)
GOODPUT_ALIASES = {"time_to_first_token": "ttft", "inter_token_latency": "itl", "request_latency": "latency"}
_UNITS_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def parse_goodput(text: str) -> dict[str, float]:
    """'ttft:200ms,itl:20ms' -> {'ttft': 200.0, 'itl': 20.0} (ms), AIPerf's names and spaces too
    ('time_to_first_token:200 inter_token_latency:20'); raises UsageError naming the bad part."""
    out: dict[str, float] = {}
    parts = text.split(",") if "," in text else text.split()
    for part in filter(None, (p.strip() for p in parts)):
        key, sep, value = part.partition(":")
        key = key.strip().lower()
        key = GOODPUT_ALIASES.get(key, key)
        if not sep or key not in GOODPUT_KEYS:
            raise UsageError(
                f"--goodput {text}: {part!r} is not METRIC:VALUE with METRIC one of {', '.join(GOODPUT_KEYS)}",
                hint="e.g. --goodput ttft:200ms,itl:20ms",
            )
        value = value.strip().lower()
        unit = next((u for u in ("us", "ms", "s") if value.endswith(u)), "ms")
        number = value[: -len(unit)] if value.endswith(unit) else value
        try:
            ms = float(number) * _UNITS_MS[unit]
        except ValueError:
            raise UsageError(f"--goodput {text}: {value!r} is not a duration (e.g. 200ms, 0.2s)") from None
        if ms <= 0:
            raise UsageError(f"--goodput {text}: {key} must be above 0")
        out[key] = ms
    return out


def streaming_summary(
    samples: Samples,
    in_level: np.ndarray,
    *,
    start_ns: int,
    end_ns: int,
    closed_loop: bool,
    goodput_slo_ms: dict[str, float] | None = None,
    window_ns: int = 0,
) -> StreamingSummary | None:
    """The streaming figures of the level's requests (mask in_level); None for unary samples.

    Goodput (as genai-perf defines it): requests per second that met every SLO, where a
    request's ITL is the mean gap between its responses; failed requests never count.
    """
    if samples.response_ns is None:
        return None
    ok = in_level & (samples.status == STATUS_OK)
    idx = np.flatnonzero(ok)
    responses = samples.response_ns
    ttft, ttft_c, second, gaps, lengths, req_itl, e2e, tpot = [], [], [], [], [], [], [], []
    gaps_by_request: dict[int, np.ndarray] = {}
    counted = samples.output_tokens
    for i in idx.tolist():
        r = responses[i]
        lengths.append(int(counted[i]) if counted is not None else len(r))
        e2e.append(samples.done_ns[i] - samples.sent_ns[i])
        if len(r) == 0:
            ttft.append(-1)
            req_itl.append(0.0)
            continue
        ttft.append(r[0] - samples.sent_ns[i])
        if not closed_loop:
            ttft_c.append(r[0] - samples.due_ns[i])
        if len(r) > 1:
            d = np.diff(r)
            gaps.append(d)
            gaps_by_request[i] = d
            second.append(d[0])
            req_itl.append(float(d.mean()))
            if lengths[-1] > 1:  # the output's tokens after the first over the time after the first
                tpot.append((r[-1] - r[0]) / (lengths[-1] - 1))
        else:
            req_itl.append(0.0)
    ttft_arr = np.array(ttft, dtype=np.int64)
    has_first = ttft_arr >= 0
    period_s = max(1e-9, (end_ns - start_ns) / 1e9)
    all_times = np.concatenate([np.asarray(r, dtype=np.int64) for r in responses]) if len(responses) else np.empty(0)
    responses_in_period = int(((all_times >= start_ns) & (all_times < end_ns)).sum())
    tokens_in_period = responses_in_period
    if counted is not None:  # a declared output tensor's elements, attributed at each request's end
        done_in = (samples.done_ns >= start_ns) & (samples.done_ns < end_ns) & (samples.status == STATUS_OK)
        tokens_in_period = int(counted[done_in].sum())
    length_arr = np.array(lengths, dtype=np.float64)
    gap_arr = np.concatenate(gaps) if gaps else np.empty(0, dtype=np.int64)
    slo = dict(goodput_slo_ms or {})
    goodput_rps = goodput_fraction = None
    if slo:
        good = np.ones(len(idx), dtype=bool)
        if "ttft" in slo:
            good &= has_first & (ttft_arr <= slo["ttft"] * 1e6)
        if "itl" in slo:
            good &= np.array(req_itl, dtype=np.float64) <= slo["itl"] * 1e6
        if "latency" in slo:
            good &= np.array(e2e, dtype=np.float64) <= slo["latency"] * 1e6
        total = int(in_level.sum())
        goodput_rps = float(good.sum()) / period_s
        goodput_fraction = float(good.sum()) / total if total else 0.0
    tpot_arr = np.array(tpot, dtype=np.float64)
    inputs = samples.input_tokens[idx, 1] if samples.input_tokens is not None else np.empty(0, dtype=np.int64)
    inputs = inputs[inputs >= 0]
    return StreamingSummary(
        windows=_windows(samples, idx, ttft_arr, gaps_by_request, all_times, start_ns, end_ns, window_ns),
        ttft=summarize("service", ttft_arr[has_first] / 1e3),
        ttft_corrected=None if closed_loop else summarize("corrected", np.array(ttft_c, dtype=np.float64) / 1e3),
        itl=summarize("service", gap_arr / 1e3),
        second_token=summarize("service", np.array(second, dtype=np.float64) / 1e3),
        output_len_mean=float(length_arr.mean()) if length_arr.size else 0.0,
        output_len_p50=float(np.percentile(length_arr, 50)) if length_arr.size else 0.0,
        output_len_p99=float(np.percentile(length_arr, 99)) if length_arr.size else 0.0,
        output_len_max=int(length_arr.max()) if length_arr.size else 0,
        responses_per_s=responses_in_period / period_s,
        output_tokens_per_s=tokens_in_period / period_s,
        request_count=len(idx),
        goodput_slo_ms=slo,
        goodput_rps=goodput_rps,
        goodput_fraction=goodput_fraction,
        tpot=summarize("service", tpot_arr / 1e3),
        output_tokens_per_s_per_user=float((1e9 / tpot_arr[tpot_arr > 0]).mean()) if (tpot_arr > 0).any() else None,
        input_len_mean=float(inputs.mean()) if inputs.size else None,
    )


def _p(values: np.ndarray, pct: float) -> float:
    return float(np.percentile(values, pct)) if values.size else 0.0


def _windows(
    samples: Samples,
    idx: np.ndarray,
    ttft_ns: np.ndarray,
    gaps_by_request: dict[int, np.ndarray],
    all_times: np.ndarray,
    start_ns: int,
    end_ns: int,
    window_ns: int,
) -> tuple[StreamWindow, ...]:
    """Per-window figures; a request belongs to the window its final response fell in."""
    if window_ns <= 0:
        return ()
    done = samples.done_ns[idx]
    out = []
    for w0 in range(start_ns, end_ns - window_ns + 1, window_ns):
        w1 = w0 + window_ns
        inw = (done >= w0) & (done < w1)
        ttft = ttft_ns[inw & (ttft_ns >= 0)] / 1e3
        members = idx[inw].tolist()
        gaps = [gaps_by_request[i] for i in members if i in gaps_by_request]
        itl = np.concatenate(gaps) / 1e3 if gaps else np.empty(0)
        if samples.output_tokens is not None:
            tokens = int(samples.output_tokens[idx[inw]].sum())
        else:
            tokens = int(((all_times >= w0) & (all_times < w1)).sum())
        out.append(StreamWindow(_p(ttft, 50), _p(ttft, 99), _p(itl, 50), _p(itl, 99), tokens / (window_ns / 1e9)))
    return tuple(out)
