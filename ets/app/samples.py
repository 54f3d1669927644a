"""Plain sampling of whole solutions on the engine: the demo's training data and quality bars.

    sample_solutions(model, tok, questions, n=16, temperature=1.0, seed=0)
        -> out[q][i] = the steps of the i-th sampled solution to question q

The same thing as `ets.demo.hf.sample_solutions` (plain `transformers` generate), on the
KV engine: the n samples of a question share its prompt's KV, and the batch decodes with
paged attention, several times faster on the demo's 300-500-token solutions. Sample i of
question q draws from its own stream (seed, q, i), so a sample does not depend on the
batch it ran in. (The demo task sits below the engine, so this lives here, not in
ets/demo/.)
"""

from __future__ import annotations

import hashlib
from typing import Sequence

from ets.demo import PROMPT_TEMPLATE
from ets.demo.hf import split_steps
from ets.engine import Engine


def _stream(seed: int, q: int, i: int) -> int:
    digest = hashlib.sha256(f"{seed}:{q}:{i}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def sample_solutions(model, tok, questions: Sequence[str], n: int = 1, temperature: float = 1.0,
                     max_new_tokens: int = 640, seed: int = 0, chunk: int = 512,
                     kv_budget_tokens: int = 1 << 19) -> list[list[list[str]]]:
    """out[q][i] = the steps of the i-th sampled solution to question q."""
    engine = Engine.from_pretrained(model, kv_budget_tokens=kv_budget_tokens, tokenizer=tok)
    jobs = [(q, i) for q in range(len(questions)) for i in range(n)]
    prompts = {q: tok.encode(PROMPT_TEMPLATE.replace("{question}", text), add_special_tokens=False)
               for q, text in enumerate(questions)}
    texts: dict[tuple[int, int], str] = {}
    for start in range(0, len(jobs), chunk):
        part = jobs[start:start + chunk]
        new = engine.generate([prompts[q] for q, _ in part], max_new_tokens=max_new_tokens,
                              temperature=temperature, seeds=[_stream(seed, q, i) for q, i in part])
        for job, ids in zip(part, new):
            texts[job] = tok.decode(ids, skip_special_tokens=True)
        engine.evict()
    return [[split_steps(texts[(q, i)]) for i in range(n)] for q in range(len(questions))]
