"""`ets demo`: every method on the embedded default, in a few minutes on a laptop CPU.

The bundled policy and step-tag PRM (trained by scripts/train_demo_models.py) search the
first problems of the demo test set with best-of-N, beam search, DVTS, REBASE and ETS at
one width, on the engine. It prints one table (accuracy, the paper's KV-size metric, the
engine's measured peak KV, wall time, throughput) and writes, into its output folder, each
method's results (JSONL, resumable), the table (Markdown and CSV) and a PNG plot.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from ets.config import METHODS, DataConfig, PolicyConfig, RewardConfig, RunConfig, SearchConfig

DEMO_DIR = Path(__file__).resolve().parent
POLICY_PATH = DEMO_DIR / "checkpoints" / "policy"
PRM_PATH = DEMO_DIR / "checkpoints" / "prm"
TEST_SET = DEMO_DIR / "data" / "test.jsonl"


def demo_config(width: int = 16, problems: int = 50, out: str | Path = "ets-demo", backend: str = "engine") -> RunConfig:
    """The embedded default as a `RunConfig`: the demo models, task and step format."""
    return RunConfig(
        search=SearchConfig(
            method="rebase", width=width, temperature=1.0, max_step_tokens=48, max_tokens=320, max_depth=10,
        ),
        policy=PolicyConfig(
            model=str(POLICY_PATH), backend=backend, prompt_template="{question}\n", step_delimiter="\n",
            kv_budget_tokens=262144, max_batch_tokens=16384,
        ),
        reward=RewardConfig(name="step_tag", model=str(PRM_PATH)),
        data=DataConfig(path=str(TEST_SET), limit=problems),
        output=str(Path(out) / "results.jsonl"),
        concurrency=problems,
    )


def run_demo(
    width: int = 16,
    problems: int = 50,
    out: str | Path = "ets-demo",
    methods: Sequence[str] = METHODS,
    backend: str = "engine",
    show_progress: bool = True,
) -> list[dict[str, Any]]:
    """Run each method; returns one table row per method (and writes the outputs)."""
    from ets.report import markdown_table, plot_methods, write_csv
    from ets.runner import build_policy, build_reward_for, run

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    base = demo_config(width, problems, out, backend)
    rows = []
    reward = None
    for method in methods:
        config = dataclasses.replace(
            base,
            search=dataclasses.replace(base.search, method=method),
            output=str(out / f"{method}_w{width}.jsonl"),
        )
        # A fresh policy per method, so the engine's peak KV is that method's alone.
        policy = build_policy(config)
        reward = reward or build_reward_for(config, policy)
        summary = run(config, show_progress=show_progress, policy=policy, reward=reward)
        rows.append({"method": method, "width": width, **summary,
                     "peak_kv_tokens": summary.get("policy_stats", {}).get("peak_kv_tokens")})
    (out / "table.md").write_text(markdown_table(rows) + "\n")
    write_csv(rows, out / "table.csv")
    plot_methods(rows, out / "methods.png", title=f"ets demo: {problems} problems, width {width}")
    return rows
