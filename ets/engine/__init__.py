"""ets.engine: a prefix-sharing paged KV-cache engine under any `transformers` decoder.

The model runs in its own `transformers` code on a packed batch (all new tokens of all
sequences in one row, per-token position ids); a custom attention function registered
through `transformers.AttentionInterface` writes K/V into a preallocated pool and attends
each token over its own sequence. A token-level radix tree stores every cached prefix once.

Public API
----------
    from ets.engine import Engine

    engine = Engine.from_pretrained(
        "tiny:llama",                # a path, a hub name, tiny:<arch>, or a built model
        kv_budget_tokens=65536,      # the pool: the whole KV memory budget, in tokens
        device="cpu", dtype="float32",
        tokenizer=None,              # needed for stop strings when passing a built model
        max_batch_tokens=8192,       # new tokens per forward (longer prefills are chunked)
    )

    # new tokens per prompt; stop: strings and/or token ids (the stopping tokens are kept)
    outs = engine.generate(prompts, max_new_tokens=64, temperature=1.0, top_p=1.0, top_k=0,
                           stop=["\\n\\n"], seed=0)            # temperature=0: greedy

    # n continuations of each path; each Continuation(handle, token_ids, finish) keeps
    # path + token_ids[:-1] cached (the last token's KV is not computed yet) until released
    conts = engine.expand([(path_ids, 4), (other_ids, 2)], max_new_tokens=32, stop=["\\n\\n"])
    engine.release([c.handle for c in conts[0]])

    # forward only: logits [len(pos), V] (or final hidden states) at positions, per sequence
    logits = engine.score(sequences, positions, hidden_states=False)

    engine.stats()   # resident_kv_tokens/bytes (all the pool holds, LRU cache included),
                     # locked_kv_tokens (paths of live handles), peak_kv_tokens,
                     # peak_live_kv_tokens (locked + running), cache_hit_tokens,
                     # computed_tokens, generated_tokens, evicted_tokens, preempted, pool_kv_*
    engine.check()   # raises AssertionError if an invariant of the cache is broken
    engine.evict()   # drop every unlocked cache entry now (returns tokens freed)
    engine.reset_stats()

finish is "eos", "stop" or "length". Sample j of request i under a seed depends only on
(seed, i, j): not on batching, cache hits or preemption. When the pool runs out, unlocked
cache entries are evicted (LRU), then the youngest running sequences are preempted and
recomputed later; if locked handles fill the pool, the oldest handle is spilled (its path
becomes evictable and is recomputed from its tokens when next extended; `spilled_handles`
counts them). A call never fails for lack of memory unless one sequence alone exceeds the
pool (a ValueError up front naming `kv_budget_tokens`).

`ets.policy.engine.EnginePolicy` is the search controller's `Policy` on this engine.

Layout (request path: engine -> scheduler -> runner -> attention -> scheduler):
    pool.py       KV tensors             allocator.py  free slots        radix.py     prefix index
    table.py      per-sequence slots     sequence.py   one request       sampling.py  sampling, stops
    attention.py  paged attention fn     cascade.py    shared-prefix decode attention
    runner.py     one forward            scheduler.py  memory + batching prefix.py    shared prefixes
    engine.py     the public API         policy.py     the controller's Policy

Tokens of a call that several sequences share are computed once (prefix.py); samples of one
path decode with cascade attention, reading the path's KV once per step (cascade.py).
"""

from ets.engine.engine import Continuation, Engine
from ets.engine.scheduler import EngineMemoryError

__all__ = ["Continuation", "Engine", "EngineMemoryError"]
