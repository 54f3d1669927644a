"""`ets demo`: every method on the embedded default, in a few minutes on a laptop CPU.

The bundled policy and step-tag PRM (trained by scripts/train_demo_models.py) search the
first problems of the demo test set with best-of-N, beam search, DVTS, REBASE and ETS at
one width, on the engine. It prints one table (accuracy, the paper's KV-size metric, the
engine's measured peak KV, wall time, throughput) and writes, into its output folder, each
method's results (JSONL, resumable), the table (Markdown and CSV) and a PNG plot.
"""

from __future__ import annotations

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
    """Run each method (a one-width sweep); returns one table row per method and writes
    results, table and plot into `out`."""
    from ets.sweep import run_sweep

    config = demo_config(width, problems, out, backend)
    return run_sweep(config, methods, [width], out, show_progress=show_progress,
                     title=f"ets demo: {problems} problems, width {width}")
