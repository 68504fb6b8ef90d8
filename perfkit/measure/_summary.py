"""The terminal summary of a run record: one row per level, then the notes under it.

Text built from a record alone (like the CSV export), so the CLI prints it and tests read it
without a server.
"""

from __future__ import annotations

from perfkit.records import LevelResult, RunRecord


def _fmt_ms(us: float) -> str:
    return f"{us / 1e3:.2f}"


def summary_table(record: RunRecord) -> str:
    """The terminal summary: one row per level, latency kind stated."""
    lines = []
    open_loop = any(lv.corrected is not None for lv in record.levels)
    head = f"{'load':>18} {'infer/s':>10} {'p50 ms':>8} {'p90 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'avg ms':>8}"
    head += f" {'errors':>7} {'±tput':>6} {'±lat':>6}  stable"
    if open_loop:
        head += "   sent/s  late  dropped"
    lines.append(head)
    for lv in record.levels:
        lat = lv.latency()
        p = lv.precision
        row = (
            f"{lv.load.label:>18} {lv.throughput_infer_per_s:>10,.1f} {_fmt_ms(lat.p50_us):>8} "
            f"{_fmt_ms(lat.p90_us):>8} {_fmt_ms(lat.p95_us):>8} {_fmt_ms(lat.p99_us):>8} {_fmt_ms(lat.mean_us):>8}"
            f" {lv.error_count:>7} {_pct(p.throughput_rel):>6} {_pct(p.latency_rel):>6}  {'yes' if lv.stable else 'NO'}"
        )
        if open_loop:
            row += f" {lv.sent_rps:>8.1f} {lv.late_count:>5} {lv.dropped_count:>8}"
        lines.append(row)
        if lat.thin:
            lines.append(f"{'':>18} (too few samples for {', '.join(lat.thin)})")
        for share in lv.models:  # a traffic mix: each model's figures under the whole mix's
            r, m_lat = share.result, share.result.latency()
            lines.append(
                f"{'  ' + share.model + ' (' + str(share.weight) + ')':>18} {r.throughput_infer_per_s:>10,.1f} "
                f"{_fmt_ms(m_lat.p50_us):>8} {_fmt_ms(m_lat.p90_us):>8} {_fmt_ms(m_lat.p95_us):>8} "
                f"{_fmt_ms(m_lat.p99_us):>8} {_fmt_ms(m_lat.mean_us):>8} {r.error_count:>7}"
                f"  requests {r.request_count}"
            )
    kind = "corrected (from due time)" if open_loop else "service (from send time)"
    lines.append(f"latency: {kind}; ±: ~95% CI half-width, relative")
    rerun = [
        f"{lv.load.label} ±{_pct(lv.precision.throughput_rerun_rel)} tput ±{_pct(lv.precision.latency_rerun_rel)} lat"
        for lv in record.levels
        if lv.precision.throughput_rerun_rel is not None or lv.precision.latency_rerun_rel is not None
    ]
    if rerun:
        lines.append(f"with the machine's between-run spread (what another run is expected within): {'; '.join(rerun)}")
    if record.spec.mix:
        lines.append(f"traffic mix {record.spec.mix_label}: each level's first row is the whole mix, then each model")
    lines.extend(_streaming_lines(record))
    for lv in record.levels:
        if lv.corrected is not None:
            s = lv.service
            lines.append(
                f"  {lv.load.label}: service p50 {_fmt_ms(s.p50_us)} ms, p99 {_fmt_ms(s.p99_us)} ms"
                f"; send lateness p99 {(lv.send_lateness_p99_us or 0) / 1e3:.3f} ms"
            )
        if lv.errors:
            lines.append(f"  {lv.load.label}: errors {lv.errors} {lv.note}")
        if lv.rejected_count:
            lines.append(
                f"  {lv.load.label}: {lv.rejected_count} requests ({lv.rejection_rate * 100:.1f}%) rejected by the"
                " server (its queue policy: full queue or queue timeout); throughput counts successes only"
            )
        lines.extend(_fleet_lines(lv))
        if lv.reconnects:
            lines.append(f"  {lv.load.label}: {lv.reconnects} connection(s) died and were replaced during the level")
        servers = [("", lv.server)] + [(f" {sh.model}", sh.result.server) for sh in lv.models]
        for who, s2 in servers:
            if s2 is None:
                continue
            batches = ", ".join(f"{k}×{v}" for k, v in s2.batch_sizes.items())
            lines.append(
                f"  {lv.load.label}:{who} server queue {_fmt_ms(s2.queue_avg_us)} ms,"
                f" infer {_fmt_ms(s2.compute_infer_avg_us)} ms, input {_fmt_ms(s2.compute_input_avg_us)} ms,"
                f" output {_fmt_ms(s2.compute_output_avg_us)} ms;"
                f" batches formed {batches or '-'}"
            )
    return "\n".join(lines)


def _fleet_lines(lv: LevelResult) -> list[str]:
    """Distributed runs: each server's share of a fleet, and each load worker's."""
    lines = []
    for s in lv.fleet:
        lat = s.corrected or s.service
        lines.append(
            f"  {lv.load.label}: server {s.url}: {s.throughput_infer_per_s:,.1f} infer/s,"
            f" p50 {_fmt_ms(lat.p50_us)} ms, p99 {_fmt_ms(lat.p99_us)} ms, {s.request_count} requests,"
            f" {s.error_count} errors"
        )
    for w in lv.workers:
        lines.append(
            f"  {lv.load.label}: worker {w.worker} {w.status}: {w.request_count} requests, {w.late_count} late,"
            f" {w.dropped_count} dropped; clock offset {w.clock_offset_ns / 1e3:+.1f} us"
            f" ± {w.clock_uncertainty_ns / 1e3:.1f} us"
        )
    if lv.incomplete:
        lines.append(f"  {lv.load.label}: INCOMPLETE: {lv.note}")
    return lines


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _streaming_lines(record: RunRecord) -> list[str]:
    """Summary lines of the streaming figures (empty for unary runs)."""
    lines = []
    for lv in record.levels:
        st = lv.streaming
        if st is None:
            continue
        ttft = st.ttft_corrected or st.ttft
        line = (
            f"  {lv.load.label}: TTFT p50 {ttft.p50_us / 1e3:.2f} ms p99 {ttft.p99_us / 1e3:.2f} ms"
            f"{' (from due time)' if st.ttft_corrected else ''}; ITL p50 {st.itl.p50_us / 1e3:.2f} ms"
            f" p99 {st.itl.p99_us / 1e3:.2f} ms; 2nd token p50 {st.second_token.p50_us / 1e3:.2f} ms;"
            f" {st.output_tokens_per_s:,.1f} tokens/s; {st.output_len_mean:.1f} tokens/request"
        )
        if st.tpot is not None and st.tpot.count:
            line += f"; TPOT p50 {st.tpot.p50_us / 1e3:.2f} ms"
        if st.output_tokens_per_s_per_user is not None:
            line += f"; {st.output_tokens_per_s_per_user:,.1f} tokens/s per user"
        if st.goodput_rps is not None:
            line += f"; goodput {st.goodput_rps:,.1f} req/s ({(st.goodput_fraction or 0) * 100:.1f}%)"
        lines.append(line)
    return lines
