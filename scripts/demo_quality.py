"""The demo models' quality bars, measured on the shipped demo test set.

    python scripts/demo_quality.py                 # all 200 test problems, 16 samples each
    python scripts/demo_quality.py --problems 50   # quicker

Samples `--samples` solutions per problem from the policy at temperature 1.0 (on the KV
engine, each sample its own seeded stream: ets/app/samples.py), labels every step with
the exact checker, scores every step with the PRM as the demo config reads it (its tag
and, with `reward.options.surprise` set there, its LM's surprise: rewards/surprise.py;
`--tag-only` reads the tag alone), and prints:
  - single-sample accuracy: the mean over all samples (and over the first sample only);
  - PRM step-level ROC AUC against the checker's labels (test problems: held out), overall
    and within every error category the checker names (ok steps against that category's);
    and the last-step score's AUC, right against wrong answers, within each problem (the
    mean over problems with both): what a vote over the samples relies on; and whether
    its misses persist along a path (ets/demo/metrics.py `miss_persistence`); and how far
    its verdict on a wrong computation is the same in every path that makes it
    (`computation_consistency`), which decides whether a tree search that gives width to
    what scores well piles it on an overrated wrong computation; and
    so the AUC over a problem's distinct computations, each counted once however many
    samples make it (`computation_auc`, the mean within a problem); and the weight REBASE's
    softmax (T 0.2) puts on partial paths with no wrong step yet, per problem and depth,
    beside their plain share (`rebase_steering`);
  - weighted best-of-N: answers weighted by the PRM's last-step score; beside it majority
    vote, the same vote with the exact verifier as PRM, and pass@N (any sample right).
  - the task's shape: steps per reference solution, and the prompt's share of its tokens.
Bars (the demo models' targets): 15% <= single <= 45%; AUC >= 0.93 overall and >= 0.85 in every category
(categories with fewer than 20 steps are shown, not judged); weighted best-of-16 >= single
+ 15 points.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ets.demo import (POLICY_PATH, PRM_PATH, PROMPT_TEMPLATE, judge_steps, load_test_problems,  # noqa: E402
                      parse_answer, reference_solution)
from ets.demo.checker import ERRORS  # noqa: E402
from ets.app.demo import demo_surprise, prm_scores  # noqa: E402
from ets.app.samples import sample_solutions  # noqa: E402
from ets.rewards.surprise import WEIGHTS  # noqa: E402
from ets.answers.aggregate import choose_answer  # noqa: E402
from ets.demo.metrics import (computation_auc, computation_consistency, mean_auc_within,  # noqa: E402
                              miss_persistence, rebase_steering, roc_auc)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", type=Path, default=POLICY_PATH)
    ap.add_argument("--prm", type=Path, default=PRM_PATH)
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tag-only", action="store_true", help="read the PRM's tag alone, not the demo config's readout")
    ap.add_argument("--surprise", help="the readout's weights, e.g. tag=0.75,step=0.29,path=0.10,bias=1.50 "
                    "(default: the demo config's; another PRM's from scripts/fit_prm_surprise.py)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    readout = demo_surprise()
    if args.surprise is not None:
        try:
            readout = {k: float(v) for k, v in (kv.split("=") for kv in args.surprise.split(","))}
        except ValueError:
            readout = {}
        if set(readout) != set(WEIGHTS) or args.tag_only:
            ap.error(f"--surprise {args.surprise!r}: give {', '.join(f'{k}=<number>' for k in WEIGHTS)}, "
                     "comma-separated, without --tag-only")

    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    t0 = time.time()
    policy = AutoModelForCausalLM.from_pretrained(args.policy).eval()
    policy_tok = AutoTokenizer.from_pretrained(args.policy)
    prm = AutoModelForCausalLM.from_pretrained(args.prm).eval()
    prm_tok = AutoTokenizer.from_pretrained(args.prm)
    problems = load_test_problems()[:args.problems]
    questions = [p.question for p in problems]

    samples = sample_solutions(policy, policy_tok, questions, n=args.samples, temperature=1.0, seed=args.seed)
    t_sample = time.time() - t0
    surprise = None if args.tag_only else readout
    scores = prm_scores(prm, prm_tok, questions, samples, surprise=surprise)
    verdicts = [[judge_steps(p, s) for s in trajs] for p, trajs in zip(problems, samples)]
    labels = [[[v == "ok" for v in per_t] for per_t in per_p] for per_p in verdicts]

    n = args.samples
    right = [[bool(s) and parse_answer(s[-1]) == p.answer for s in trajs] for p, trajs in zip(problems, samples)]
    single = sum(map(sum, right)) / (len(problems) * n)
    first = sum(r[0] for r in right) / len(problems)
    auc = roc_auc([ok for per_p in labels for per_t in per_p for ok in per_t],
                  [x for per_p in scores for per_t in per_p for x in per_t])
    flat = [(v, x) for vs, sc in zip(verdicts, scores) for per_v, per_s in zip(vs, sc) for v, x in zip(per_v, per_s)]
    ok_scores = [x for v, x in flat if v == "ok"]
    by_category = {}
    for cat in ERRORS:
        bad_scores = [x for v, x in flat if v == cat]
        by_category[cat] = (len(bad_scores), roc_auc([True] * len(ok_scores) + [False] * len(bad_scores),
                                                     ok_scores + bad_scores) if bad_scores else float("nan"))
    # What a vote over the samples needs: within a problem, right answers' last-step scores
    # above wrong ones'. The pooled step AUC above also counts easy comparisons (across
    # problems and depths) that no search ever makes.
    answered = [[i for i, t in enumerate(trajs) if t and parse_answer(t[-1]) is not None] for trajs in samples]
    answer_auc, problems_right_and_wrong = mean_auc_within(
        ([r[i] for i in ids], [sc[i][-1] for i in ids]) for ids, sc, r in zip(answered, scores, right))
    n_steps = sum(len(per_t) for per_p in labels for per_t in per_p)
    bad = sum(not ok for per_p in labels for per_t in per_p for ok in per_t) / max(1, n_steps)

    def vote_acc(weights_of):
        hits = 0
        for p, trajs, sc, lab in zip(problems, samples, scores, labels):
            answers = [str(a) if (a := parse_answer(s[-1]) if s else None) is not None else None for s in trajs]
            weights = [[w] for w in weights_of(sc, lab)]
            hits += choose_answer(answers, weights, "last", "weighted") == str(p.answer)
        return hits / len(problems)

    figures = {
        "prm_readout": "tag and surprise " + json.dumps(surprise) if surprise else "tag alone",
        "problems": len(problems),
        "samples_per_problem": n,
        "single_sample_accuracy": single,
        "first_sample_accuracy": first,
        "prm_step_auc": auc,
        "prm_answer_auc_within_problem": _or_nan(answer_auc),
        "problems_right_and_wrong": problems_right_and_wrong,
        "prm_miss_persistence": miss_persistence([t for per_p in labels for t in per_p],
                                                 [t for per_p in scores for t in per_p]),
        "prm_computation_consistency": computation_consistency(samples, labels, scores),
        "prm_computation_auc_within": _or_nan(computation_auc(samples, labels, scores)[0]),
        **dict(zip(("prm_rebase_weight_on_right", "right_paths_plain_share"), rebase_steering(samples, labels, scores))),
        "steps_scored": n_steps,
        "bad_step_rate": bad,
        f"weighted_best_of_{n}": vote_acc(lambda sc, lab: [s[-1] if s else 0.0 for s in sc]),
        f"majority_of_{n}": vote_acc(lambda sc, lab: [1.0] * len(sc)),
        f"verifier_weighted_best_of_{n}": vote_acc(lambda sc, lab: [float(l[-1]) if l else 0.0 for l in lab]),
        f"pass_at_{n}": sum(any(r) for r in right) / len(problems),
        **shape(problems, policy_tok),
        "sampling_seconds": round(t_sample, 1),
        "total_seconds": round(time.time() - t0, 1),
    }
    gain = figures[f"weighted_best_of_{n}"] - single
    judged = {cat: a for cat, (k, a) in by_category.items() if k >= 20}
    bars = {
        "single-sample accuracy in [15%, 45%]": 0.15 <= single <= 0.45,
        "PRM step AUC >= 0.93": auc >= 0.93,
        f"PRM step AUC >= 0.85 in every category ({', '.join(judged)})": all(a >= 0.85 for a in judged.values()),
        f"weighted best-of-{n} >= single + 15 points": gain >= 0.15,
    }
    print(f"demo quality on {len(problems)} test problems x {n} samples (T=1.0, seed {args.seed})")
    for k, v in figures.items():
        print(f"  {k:32s} {v:.3f}" if isinstance(v, float) else f"  {k:32s} {v}")
    print(f"  {'weighted gain over single':32s} {gain * 100:+.1f} points")
    print("  PRM step AUC by error category (ok steps against the category's):")
    for cat, (k, a) in by_category.items():
        print(f"    {cat:12s} {k:6d} steps  AUC {a:.3f}")
    for k, ok in bars.items():
        print(f"  [{'PASS' if ok else 'FAIL'}] {k}")
    if args.json:
        args.json.write_text(json.dumps({**figures, "auc_by_category": by_category, "bars": bars}, indent=2) + "\n")
    return 0 if all(bars.values()) else 1


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def shape(problems, tok) -> dict:
    """Steps per reference solution, and the prompt's tokens over the solution's."""
    rng = random.Random(0)
    steps, shares = [], []
    for p in problems:
        sol = reference_solution(p, rng)
        prompt = len(tok.encode(PROMPT_TEMPLATE.replace("{question}", p.question)))
        steps.append(len(sol))
        shares.append(prompt / len(tok.encode("\n".join(sol) + "\n")))
    steps, shares = np.asarray(steps), np.asarray(shares)
    return {"steps_median": float(np.median(steps)), "steps_min": int(steps.min()), "steps_max": int(steps.max()),
            "prompt_over_solution_median": float(np.median(shares)),
            "prompt_over_solution_p90": float(np.percentile(shares, 90))}


if __name__ == "__main__":
    sys.exit(main())
