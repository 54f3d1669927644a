"""Plain `transformers` helpers for the demo models: batched sampling and PRM scoring.

The search framework runs the demo models on its own engine; these helpers are the simple
path that training (scripts/train_demo_models.py), the quality bars
(scripts/demo_quality.py) and the checkpoint smoke test use.

PRM input (the Math-Shepherd step-tag convention): the question, a space, then every
step followed by the tag, steps separated by a newline:

    question + " " + step_1 + " ки\n" + step_2 + " ки\n" + ... + step_n + " ки"

The logits *at* each tag token, restricted to the tokens "+" and "-", give the step's
score: softmax([logit(+), logit(-)])[0]. Scoring goes through the `step_tag` reward itself
(`ets.app.demo.prm_scores`: the demo task sits below the rewards, so it cannot call them).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ets.demo import PROMPT_TEMPLATE, STEP_DELIMITER, STEP_TAG


def prm_text(question: str, steps: Sequence[str]) -> str:
    return question + " " + "\n".join(s.strip() + STEP_TAG for s in steps)


def single_token_id(tok, text: str) -> int:
    ids = tok.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"{text!r} is not a single token of this tokenizer: {ids}")
    return ids[0]


def split_steps(text: str) -> list[str]:
    """A generated solution -> its non-empty steps (one per line)."""
    return [s.strip() for s in text.split(STEP_DELIMITER) if s.strip()]


@torch.no_grad()
def sample_solutions(model, tok, questions: Sequence[str], n: int = 1, temperature: float = 1.0,
                     max_new_tokens: int = 640, batch_size: int = 256, seed: int = 0) -> list[list[list[str]]]:
    """out[q][i] = the steps of the i-th sampled solution to question q (greedy if temperature 0)."""
    prompts = [PROMPT_TEMPLATE.replace("{question}", q) for q in questions for _ in range(n)]
    tok.padding_side = "left"
    texts: list[str] = []
    torch.manual_seed(seed)
    for start in range(0, len(prompts), batch_size):
        enc = tok(prompts[start:start + batch_size], return_tensors="pt", padding=True)
        gen = model.generate(
            **enc, max_new_tokens=max_new_tokens, do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None, top_k=0 if temperature > 0 else None,
            top_p=None, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        )
        texts += tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    steps = [split_steps(t) for t in texts]
    return [steps[i * n:(i + 1) * n] for i in range(len(questions))]
