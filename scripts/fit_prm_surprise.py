"""Fit the weights of a step-tag PRM's surprise readout (rewards/surprise.py) on the demo.

    python scripts/fit_prm_surprise.py                      # the shipped demo PRM
    python scripts/fit_prm_surprise.py --prm /tmp/ck/prm    # another one

The policy samples `--samples` solutions to each of `--problems` *validation-split*
problems (T=1.0; no test problem is seen), the exact checker labels every step, and the
PRM reads each step's tag and its LM's surprise at the step's numbers; a logistic
regression of the labels on (tag logit difference, s_k, min s_1..s_k) gives the four
weights. Prints them as the `reward.options.surprise` line of ets/demo/demo.yaml, and the
step AUC on these samples of the tag alone and of the readout (in-sample: the test-set
figures are scripts/demo_quality.py's).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ets.app.demo import fit_demo_surprise  # noqa: E402
from ets.demo import POLICY_PATH, PRM_PATH  # noqa: E402
from ets.rewards.surprise import WEIGHTS  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", type=Path, default=POLICY_PATH)
    ap.add_argument("--prm", type=Path, default=PRM_PATH)
    ap.add_argument("--problems", type=int, default=100, help="validation-split problems")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--seed", type=int, default=7, help="the sampling streams' seed")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    t0 = time.time()
    policy = AutoModelForCausalLM.from_pretrained(args.policy).eval()
    prm = AutoModelForCausalLM.from_pretrained(args.prm).eval()
    readout, fig = fit_demo_surprise(policy, AutoTokenizer.from_pretrained(args.policy), prm,
                                     AutoTokenizer.from_pretrained(args.prm), args.problems, args.samples, args.seed)
    print(f"{fig['steps']} steps ({fig['wrong_steps']} wrong) of {args.problems} validation problems x "
          f"{args.samples} samples, {time.time() - t0:.0f} s")
    print(f"step AUC on them (in-sample): tag alone {fig['auc_tag']:.3f}, readout {fig['auc_readout']:.3f}")
    print("    surprise: {" + ", ".join(f"{k}: {getattr(readout, k):.4f}" for k in WEIGHTS) + "}")


if __name__ == "__main__":
    main()
