"""Tokens a step-tag PRM computes for one search round, with and without the prefix cache.

One round at width W (default 16): W trajectories of one ~100-token question that share
their history (the steps chosen in earlier rounds) and differ in the newest step, as the
children of one round of beam search / REBASE / ETS do. The PRM scores them

  - on the plain forward backend: every token of every trajectory is computed;
  - on the engine backend: the question and the history are computed once (or not at all,
    when the previous round already scored the parent, as in a real search), and only the
    newest steps are computed for each sibling.

    python scripts/bench_prm_cache.py                      # tiny random model, CPU
    python scripts/bench_prm_cache.py --model /models/math-shepherd-mistral-7b-prm --device cuda --dtype bfloat16
"""

from __future__ import annotations

import argparse
import time

# Cut to --question-tokens tokens of the PRM's tokenizer (long enough for any tokenizer).
QUESTION_TEXT = (
    "A farmer has 17 sheep, 23 chickens and 9 cows. He sells a third of the sheep rounded down, "
    "buys twice as many chickens as he has cows, and every cow gives 12 litres of milk a day. "
    "How many animals does he have now, and how much milk does he get in a week? Give the number "
    "of animals first and then the litres of milk, and explain each step of the computation so "
    "that a student who has just learned multiplication and division can follow it. Remember "
    "that the farmer keeps every animal he does not sell, that chickens give no milk, and that a "
    "week has seven days; write the final answer as two numbers separated by a comma."
)
HISTORY = [
    "He sells 17 // 3 = 5 sheep, so 12 sheep are left.",
    "He buys 2 * 9 = 18 chickens, so he has 23 + 18 = 41 chickens.",
]


def newest_steps(width: int) -> list[str]:
    return [f"Animals: 12 + 41 + 9 = {62 + i}; milk: 9 * 12 * 7 = {756 + 3 * i} litres." for i in range(width)]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny:llama", help="a step-tag PRM (HF folder) or tiny:<arch>")
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--question-tokens", type=int, default=100)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--kv-budget-tokens", type=int, default=16384)
    args = p.parse_args(argv)

    from ets.engine import Engine
    from ets.models.load import load_causal_lm
    from ets.rewards.step_tag import StepTagPRM

    model, tok = load_causal_lm(args.model, device=args.device, dtype=args.dtype)

    def on_engine() -> StepTagPRM:
        """A step-tag PRM on a fresh engine (empty prefix cache) over the same weights."""
        engine = Engine.from_pretrained(model, kv_budget_tokens=args.kv_budget_tokens, tokenizer=tok)
        return StepTagPRM.from_model(model, tok, engine=engine)

    plain, cached = StepTagPRM.from_model(model, tok), on_engine()

    question = tok.decode(tok.encode(QUESTION_TEXT, add_special_tokens=False)[: args.question_tokens]).strip()
    question_tokens = len(tok.encode(question, add_special_tokens=False))
    siblings = [[HISTORY + [step] for step in newest_steps(args.width)]]
    print(f"model {args.model} | width {args.width} | question {question_tokens} tokens | "
          f"history {len(HISTORY)} steps | trajectory {len(cached.encode(question, siblings[0][0])[0])} tokens")

    def round_cost(prm, trajs) -> tuple[dict[str, int], list[float], float]:
        before = prm.stats()
        start = time.perf_counter()
        scores = prm([question], trajs)
        elapsed = time.perf_counter() - start
        after = prm.stats()
        return {k: after[k] - before[k] for k in ("computed_tokens", "cache_hit_tokens")}, scores, elapsed

    plain_cost, plain_scores, t_plain = round_cost(plain, siblings)
    cold_cost, cold_scores, t_cold = round_cost(cached, siblings)
    # A real search scored the parent in the previous round; then only the new steps are new.
    warm = on_engine()
    warm([question], [[HISTORY]])
    warm_cost, warm_scores, t_warm = round_cost(warm, siblings)

    diff = max(abs(a - b) for s in (cold_scores, warm_scores) for a, b in zip(_flat(s), _flat(plain_scores)))
    print(f"{'PRM backend':<44} {'computed tokens':>16} {'cache hits':>11} {'seconds':>8}")
    print(f"{'plain forward (no cache)':<44} {plain_cost['computed_tokens']:>16} {plain_cost['cache_hit_tokens']:>11} {t_plain:>8.3f}")
    print(f"{'engine, cold cache (round from scratch)':<44} {cold_cost['computed_tokens']:>16} {cold_cost['cache_hit_tokens']:>11} {t_cold:>8.3f}")
    print(f"{'engine, parent scored in the previous round':<44} {warm_cost['computed_tokens']:>16} {warm_cost['cache_hit_tokens']:>11} {t_warm:>8.3f}")
    print(f"reduction: {plain_cost['computed_tokens'] / max(1, cold_cost['computed_tokens']):.1f}x cold, "
          f"{plain_cost['computed_tokens'] / max(1, warm_cost['computed_tokens']):.1f}x warm | "
          f"max |score difference| engine vs plain: {diff:.2e}")


def _flat(scores):
    return [v for q in scores for t in q for v in t]


if __name__ == "__main__":
    main()
