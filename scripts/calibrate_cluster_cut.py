"""Where to cut ETS's dendrogram on the demo task: cosine distances between sibling steps.

    python scripts/calibrate_cluster_cut.py            # 40 validation problems, MiniLM and its static form
    python scripts/calibrate_cluster_cut.py --embedder all-MiniLM-L6-v2   # one embedder
    python scripts/calibrate_cluster_cut.py --embedder policy --embedder prm   # the demo models' hidden states
    python scripts/calibrate_cluster_cut.py --config my.yaml --embedder policy  # another config's models

ETS rewards covering *semantically different* steps (docs/algorithms.md, "ETS: the integer program"). The paper cuts
at cosine distance 0.05 with its own embedder on long steps; on short demo steps MiniLM
puts two wordings of the same computation further apart than that. For the first step of
each problem (every part of every item is a valid first step) this embeds several wordings of
each alternative and prints the distances between two wordings of the *same* quantity and
between *different* quantities, with the share of each below candidate cuts; and between
each wording and a wrong version of it (ets/demo/spoil.py: in the demo, a wrong step is the
right one with a number off, the mistake the policy makes). A good cut merges the first and
neither of the others; demo.yaml uses the result. Each embedder also gets the ROC AUC of its
distance as a test of "other quantity" (1.0: every pair of wordings of one quantity is
closer than every pair of different quantities), and the seconds it took to embed the
texts, so a cheaper embedder is checked against MiniLM on the same pairs. Last, the cut it
suggests: the largest candidate cut that merges at most 2% of pairs of different
quantities (`--max-merged`), and its `cluster_threshold` entry.

`policy` and `prm` embed a step as a search does (lp/clustering.py): the mean of the
model's final hidden states over the step, L2-normalised. `policy`: the states the
step's tokens are sampled from, after the problem's prompt (`policy.prompt_template`; the
step followed by `policy.step_delimiter`), pooled by the policy's engine exactly as it
pools them while it decodes (or by a plain forward, for another backend); `prm`: the PRM's
states over the step as it scores it (`score_with_embeddings`). The models are the
config's (`--config`, default the demo's, ets/demo/demo.yaml).
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ets.config import HIDDEN_EMBEDDERS  # noqa: E402
from ets.demo import generate_split  # noqa: E402
from ets.demo.metrics import roc_auc  # noqa: E402
from ets.demo.solutions import next_moves, step_text  # noqa: E402
from ets.demo.spoil import spoil  # noqa: E402
from ets.lp.clustering import DEFAULT_EMBEDDER, STATIC_PREFIX, load_embedder  # noqa: E402

CUTS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.4)
DEMO_CONFIG = Path(__file__).resolve().parents[1] / "ets" / "demo" / "demo.yaml"
_LOADED: dict[str, tuple] = {}   # config path -> (config, policy)

# One problem's first-step texts: (question, [(move, text, wrong version of text)]).
Steps = list[tuple[object, str, str]]
# An embedder: (question, texts) -> unit vectors [len(texts), dim]
Embed = Callable[[str, list[str]], np.ndarray]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=40)
    ap.add_argument("--wordings", type=int, default=6, help="wordings sampled per alternative")
    ap.add_argument("--embedder", action="append",
                    help=f"repeatable; default {DEFAULT_EMBEDDER} and {STATIC_PREFIX}{DEFAULT_EMBEDDER}; "
                         f"{' and '.join(HIDDEN_EMBEDDERS)}: the config's models' hidden states")
    ap.add_argument("--config", default=str(DEMO_CONFIG),
                    help="the run config whose policy and PRM `policy` and `prm` use (default: the demo's)")
    ap.add_argument("--max-merged", type=float, default=0.02,
                    help="the suggested cut merges at most this share of pairs of different quantities")
    args = ap.parse_args(argv)

    rng = random.Random(0)
    problems = []
    for p in generate_split("validation", args.problems, seed=1):
        steps = []
        for move in next_moves(p):
            for _ in range(args.wordings):
                text = step_text(p, move, rng)
                steps.append((move, text, spoil(p, text, rng)))
        problems.append((p.question, steps))
    for name in args.embedder or [DEFAULT_EMBEDDER, STATIC_PREFIX + DEFAULT_EMBEDDER]:
        report(name, embedder(name, args.config), problems, args.max_merged)


def embedder(name: str, config_path: str) -> Embed:
    """The embedding function `name` stands for (models loaded once, here)."""
    if name not in HIDDEN_EMBEDDERS:
        model = load_embedder(name)
        model.encode(["warm-up"])  # the first call pays one-off set-up
        return lambda question, texts: model.encode(texts, normalize_embeddings=True)
    import ets

    if config_path not in _LOADED:  # one policy (and PRM) for both hidden-state embedders
        config = ets.load_config(config_path)
        ets.apply_torch_threads(config)
        _LOADED[config_path] = config, ets.build_policy(config)
    config, policy = _LOADED[config_path]
    if name == "policy":
        return lambda question, texts: policy_vectors(policy, question, texts)
    reward = ets.build_reward(config, policy)
    if not getattr(reward, "embeds_steps", False):
        sys.exit(f"calibrate_cluster_cut.py: reward {config.reward.name!r} hands out no step embeddings "
                 f"({getattr(reward, 'embeds_steps_note', None)})")
    delimiter = config.policy.step_delimiter

    def prm_vectors(question: str, texts: list[str]) -> np.ndarray:
        _, embeddings = reward.score_with_embeddings([question], [[[t + delimiter] for t in texts]])
        return np.stack(embeddings[0])
    return prm_vectors


def policy_vectors(policy, question: str, texts: list[str]) -> np.ndarray:
    """Each text's `policy` embedding as the step after `question`'s prompt: the mean of
    the final hidden states its tokens (the delimiter after it included) are sampled from."""
    import torch

    from ets.engine.hidden import final_hidden

    prompt = policy.format_prompt(question).token_ids
    tokenizer, delimiter = policy.tokenizer, policy.config.step_delimiter
    paths = [prompt + tokenizer(t + delimiter, add_special_tokens=False)["input_ids"] for t in texts]
    spans = [(len(prompt) - 1, len(path) - 1) for path in paths]
    engine = getattr(policy, "engine", None)
    if engine is not None:  # the engine's own pooling, as in a search
        _, pooled = engine.score_pooled(paths, [[] for _ in paths], spans)
        return pooled.numpy()
    model = policy.model
    vectors = []
    with torch.inference_mode():
        for path, (lo, hi) in zip(paths, spans):
            with final_hidden(model) as states:
                model(input_ids=torch.tensor([path], device=model.device), logits_to_keep=1)
            vectors.append(torch.nn.functional.normalize(states[-1][0, lo:hi].float().mean(0), dim=0).cpu())
    return torch.stack(vectors).numpy()


def report(name: str, embed: Embed, problems: list[tuple[str, Steps]], max_merged: float) -> None:
    """Distances between the wordings of each problem's first steps under one embedder."""
    same, different, wrong, seconds = [], [], [], 0.0
    for question, steps in problems:
        texts = [t for _, t, _ in steps]
        t0 = time.perf_counter()
        unit = embed(question, texts + [bad for _, _, bad in steps])
        seconds += time.perf_counter() - t0
        right, spoiled = unit[:len(steps)], unit[len(steps):]
        for i, j in itertools.combinations(range(len(steps)), 2):
            if texts[i] != texts[j]:                     # identical texts say nothing
                d = 1.0 - float(right[i] @ right[j])
                (same if steps[i][0] == steps[j][0] else different).append(d)
        wrong.extend(1.0 - np.einsum("ij,ij->i", right, spoiled))
    same, different, wrong = np.asarray(same), np.asarray(different), np.asarray(wrong)
    texts = 2 * sum(len(steps) for _, steps in problems)
    auc = roc_auc([False] * len(same) + [True] * len(different), np.concatenate([same, different]))
    print(f"{name}, {len(problems)} problems, first-step alternatives ({texts} texts embedded in {seconds:.2f} s)")
    for label, d in (("same quantity, other wording:", same), ("different quantities:", different),
                     ("one number wrong (spoiled):", wrong)):
        print(f"  {label:<30} {len(d)} pairs, distance p10/p50/p90 "
              + " / ".join(f"{x:.4f}" for x in np.percentile(d, [10, 50, 90])))
    print(f"  ROC AUC of distance for 'different quantity': {auc:.3f}")
    print("  cut    same merged   different merged   wrong merged")
    for cut in CUTS:
        print(f"  {cut:<6} {np.mean(same <= cut):>11.1%} {np.mean(different <= cut):>18.1%} "
              f"{np.mean(wrong <= cut):>14.1%}")
    fits = [cut for cut in CUTS if np.mean(different <= cut) <= max_merged]
    if fits:
        cut = fits[-1]
        print(f"  suggested cut: {cut} (merges {np.mean(same <= cut):.0%} of wordings, {np.mean(different <= cut):.1%} "
              f"of different quantities, {np.mean(wrong <= cut):.1%} of wrong versions): "
              f"cluster_threshold: {{{name}: {cut}}}")
    else:
        print(f"  suggested cut: none of {CUTS} merges at most {max_merged:.0%} of different quantities")


if __name__ == "__main__":
    main()
