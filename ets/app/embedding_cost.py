"""What producing ETS's step embeddings cost a run: one entry of the run summary.

    summary["embedding"] = embedding_cost(summary, config.search, new_records)

A sentence embedder runs in the selection phase (ETS embeds each problem's new step
texts: `embed_seconds` and `embedded_steps` in the records' strategy
metrics); `policy` and `prm` are pooled from hidden states in the policy's decode
forwards or the PRM's scoring forwards (their `stats()`: the host time the pooling took,
the vectors handed out), with no forward of their own. The figures count this run's new
problems, so the embedders compare per step. What a step is differs a little: a sentence
embedder is asked for the candidates of each frontier it clusters, the hidden states
come with every new step.
"""

from __future__ import annotations

from typing import Any

SOURCES = {
    "policy": "the policy's hidden states, pooled in its decode forwards (no extra forward)",
    "prm": "the PRM's hidden states, pooled in its scoring forwards (no extra forward)",
}


def embedding_cost(summary: dict[str, Any], search, new_records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """{embedder, source, steps, seconds} of the run whose `summary` holds the policy's and
    the reward's stats; None when the run clustered nothing (not ETS, lambda_s 0, or no
    new problems)."""
    if search is None or search.method != "ets" or search.lambda_s <= 0 or not new_records:
        return None
    embedder = search.embedder
    if embedder in SOURCES:
        stats = summary.get("policy_stats" if embedder == "policy" else "reward_stats") or {}
        steps, seconds = stats.get("embedded_steps"), stats.get("embed_seconds")
        source = SOURCES[embedder]
    else:
        metrics = [r.get("strategy_metrics", {}) for r in new_records]
        steps = sum(m.get("embedded_steps", 0) for m in metrics)
        seconds = sum(m.get("embed_seconds", 0.0) for m in metrics)
        source = "a sentence model, in the selection phase"
    return {"embedder": embedder, "source": source, "steps": steps,
            "seconds": None if seconds is None else round(seconds, 4)}


def embedding_line(summary: dict[str, Any]) -> str | None:
    """The run summary's line for `summary["embedding"]`, if any."""
    cost = summary.get("embedding")
    if not cost:
        return None
    steps, seconds = cost.get("steps"), cost.get("seconds")
    if steps is None or seconds is None:
        figures = "not measured"
    else:
        per = f" ({seconds / steps * 1e6:.0f} us a step)" if steps else ""
        figures = f"{steps:,} steps in {seconds:.2f} s{per}"
    return f"embeddings: {cost['embedder']} ({cost['source']}): {figures}"
