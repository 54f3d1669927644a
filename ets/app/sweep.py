"""`ets sweep`: every (method, width) pair on one dataset -> CSV, Markdown and plots.

Each pair writes its own resumable results file `<out>/<method>_w<width>.jsonl` (and its
summary), so an interrupted sweep resumes without redoing finished pairs or duplicating
rows; the table is rebuilt from the summaries at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Sequence

from ets.config import ConfigError, RunConfig


def parse_widths(text: str) -> list[int]:
    """`16,64` -> [16, 64]; each width is validated where every width is, by SearchConfig
    (`pair_config`)."""
    try:
        widths = [int(w) for w in text.split(",") if w.strip()]
    except ValueError as exc:
        raise ConfigError(f"--widths {text!r}: give integers separated by commas, e.g. 16,64,256") from exc
    if not widths:
        raise ConfigError(f"--widths {text!r}: give at least one width, e.g. 16,64,256")
    return widths


def parse_methods(text: str) -> list[str]:
    import search

    methods = [m.strip() for m in text.split(",") if m.strip()]
    if not methods:
        raise ConfigError("--methods is empty; e.g. --methods best_of_n,beam,dvts,rebase,ets")
    return [search.canonical_name(m) for m in methods]  # KeyError lists the known names


def pair_config(base: RunConfig, method: str, width: int, out: Path) -> RunConfig:
    return dataclasses.replace(
        base,
        search=dataclasses.replace(base.search, method=method, width=width),
        output=str(out / f"{method}_w{width}.jsonl"),
    )


# Per-run details the summary holds as mappings; the table keeps their headline figures.
_DETAILS = ("policy_stats", "policy_memory", "reward_stats")


def pair_row(config: RunConfig, summary: dict[str, Any]) -> dict[str, Any]:
    """One table row: the pair, its summary, and the policy's own KV memory figures
    (`ets.policy.base.KVMemory`: None where the backend does not measure them)."""
    memory = summary.get("policy_memory", {})
    return {
        "method": config.search.method,
        "width": config.search.width,
        "aggregation": config.search.aggregation,
        "vote": config.search.vote,
        "answer_rule": f"{config.search.vote} ({config.search.aggregation})",
        **{k: v for k, v in summary.items() if k not in _DETAILS},
        # the ETS code's KV metric (None, printed n/a, in a summary written before it was kept)
        "kv_size_ref_per_problem": summary.get("kv_size_ref_per_problem"),
        "peak_kv_tokens": memory.get("peak_live_tokens"),
        "mean_kv_tokens": memory.get("mean_live_tokens"),
    }


def run_sweep(
    base: RunConfig,
    methods: Sequence[str],
    widths: Sequence[int],
    out: str | Path,
    *,
    show_progress: bool = True,
    fresh_policy_per_pair: bool = True,
    title: str = "",
    workers: int = 1,
    ray_address: str | None = None,
) -> list[dict[str, Any]]:
    """Run every pair (methods x widths); returns the table rows, writes table and plots.
    With `workers` > 1 or a `ray_address`, each pair runs on that many Ray workers (fresh
    ones per pair, loading their own models); one Ray session serves the whole sweep."""
    from ets.app.report import markdown_table, plot_methods, plot_sweep, write_csv
    from ets.app.run import build_reward_for, run
    from ets.policy.build import build_policy

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    configs = [pair_config(base, m, w, out) for w in widths for m in methods]  # validate all first
    rows, reward, policy = [], None, None
    distributed = workers > 1 or ray_address is not None
    with _ray_for(base, workers, ray_address, show_progress) if distributed else contextlib.nullcontext():
        for config in configs:
            if distributed:
                summary = run(config, show_progress=show_progress, workers=workers, ray_address=ray_address)
                rows.append(pair_row(config, summary))
                continue
            # A fresh policy and reward model per pair keep each pair's peak KV (the policy's
            # pool and the PRM's own) that pair's alone, and a PRM that scores on the policy's
            # engine (share_policy_engine) on this pair's engine, not the first pair's.
            if policy is None or fresh_policy_per_pair:
                policy = build_policy(config.policy, config.search)
                reward = build_reward_for(config, policy)
            summary = run(config, show_progress=show_progress, policy=policy, reward=reward)
            rows.append(pair_row(config, summary))
    (out / "table.md").write_text(markdown_table(rows) + "\n")
    write_csv(rows, out / "table.csv")
    if len(widths) > 1:
        plot_sweep(rows, out)
    else:
        plot_methods(rows, out / "methods.png", title=title)
    return rows


def _ray_for(base: RunConfig, workers: int, address: str | None, show_progress: bool):
    """One Ray session (joined, or local and stopped at the end) for every pair of a sweep."""
    import os

    from ets.app.distributed import ray_session, worker_resources

    cpus, _ = worker_resources(base, workers, None, None)
    return ray_session(address, num_cpus=max(os.cpu_count() or 1, workers * cpus), quiet=not show_progress)


def relative_to_rebase(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Per width: ETS's KV-size reduction and throughput gain over REBASE, as lines."""
    lines = []
    by = {(r["method"], r["width"]): r for r in rows}
    for width in sorted({r["width"] for r in rows}):
        ets, reb = by.get(("ets", width)), by.get(("rebase", width))
        if not ets or not reb:
            continue
        kv = _ratio(reb["kv_size_per_problem"], ets["kv_size_per_problem"]) + " smaller"
        if ets.get("kv_size_ref_per_problem") is not None and reb.get("kv_size_ref_per_problem") is not None:
            # the paper's 1.8x is on the ETS code's metric
            kv += f" ({_ratio(reb['kv_size_ref_per_problem'], ets['kv_size_ref_per_problem'])} on the ETS code's metric)"
        tp = _ratio(ets.get("tokens_per_s"), reb.get("tokens_per_s"))
        pp = _ratio(ets.get("problems_per_s"), reb.get("problems_per_s"))
        acc = 100 * (ets["accuracy"] - reb["accuracy"])
        lines.append(
            f"W={width}: ETS vs REBASE: KV size {kv}, throughput {pp} problems/s "
            f"({tp} tokens/s), accuracy {acc:+.1f} points"
        )
    return lines


def _ratio(a: float | None, b: float | None) -> str:
    """`a / b` as "1.23x", or "n/a" when either is unknown (a summary rebuilt without
    timings) or the divisor is 0."""
    return f"{a / b:.2f}x" if a is not None and b else "n/a"
