"""ets.engine: a prefix-sharing paged KV-cache engine under any `transformers` decoder.

The model runs in its own `transformers` code on a packed batch (all new tokens of all
sequences in one row, per-token position ids); a custom attention function registered
through `transformers.AttentionInterface` writes K/V into a preallocated pool and attends
each token over its own sequence. A token-level radix tree stores every cached prefix once.
The engine knows nothing of the search: it imports only itself and ets.models.

Public API
----------
    from ets.engine import DEFAULT_KV_TOKENS, Engine

    engine = Engine.from_pretrained(
        "tiny:llama",                # a path, a hub name, tiny:<arch>, or a built model
        kv_budget_tokens=None,       # the pool: the whole KV budget in tokens (None: DEFAULT_KV_TOKENS)
        device="cpu", dtype="float32",
        tokenizer=None,              # needed for stop strings when passing a built model
        max_batch_tokens=None,       # new tokens per forward, longer prefills chunked
                                     #   (None: DEFAULT_MAX_BATCH_TOKENS)
        kv_dtype=None,               # how K/V are stored: float32, bfloat16, float16 (None: as the
                                     #   model; narrower: fewer bytes, logits within its precision)
        batch_invariant=True,        # a sequence's logits the same bit for bit whatever else runs
                                     #   (CPU; see invariant.py); False: faster at a few sequences
        cascade=True,                # siblings read their shared prefix once (cascade.py);
                                     #   False: each sequence attends its whole context plainly
        compile="auto",              # "on": the model's forward under torch.compile, attention an
    )                                #   opaque op (compiled.py); "off": eager; "auto": on cuda only

    # new tokens per prompt; stop: strings and/or token ids (the stopping tokens are kept)
    outs = engine.generate(prompts, max_new_tokens=64, temperature=1.0, top_p=1.0, top_k=0,
                           stop=["\\n\\n"], seed=0)            # temperature=0: greedy
    outs = engine.generate(prompts, seeds=[11, 12, ...])      # or one seed per prompt

    # n continuations of each path; each Continuation(handle, token_ids, finish) keeps
    # path + token_ids[:-1] cached (the last token's KV is not computed yet) until released.
    # A request is (token_ids, n) or (token_ids, n, seed), i.e. a `Request`.
    conts = engine.expand([(path_ids, 4), (other_ids, 2, 1234)], max_new_tokens=32,
                          stop=["\\n\\n"], seed=0)
    engine.release([c.handle for c in conts[0]])

    # with embed=True each Continuation also carries its `embedding`: the mean of the final
    # hidden states its tokens were sampled from, L2-normalised, pooled on the device (hidden.py)
    conts = engine.expand([(path_ids, 4)], max_new_tokens=32, stop=["\\n\\n"], embed=True)

    # forward only: logits [len(pos), V] (or final hidden states) at positions, per sequence
    logits = engine.score(sequences, positions, hidden_states=False)
    # the same, and per sequence the pooled final hidden states over a span [lo, hi) (or None)
    logits, pooled = engine.score_pooled(sequences, positions, spans)

    engine.stats()   # resident_kv_tokens/bytes (all the pool holds, LRU cache included),
                     # locked_kv_tokens (paths of live handles), peak_kv_tokens,
                     # peak_live_kv_tokens (locked + running), cache_hit_tokens,
                     # computed_tokens, generated_tokens, evicted_tokens, preempted, pool_kv_*,
                     # embedded_steps and embed_seconds (pooled embeddings, host time),
                     # steps (forwards) and <phase>_seconds (engine.STEP_PHASES)
    engine.check()   # raises AssertionError if an invariant of the cache is broken
    engine.evict()   # drop every unlocked cache entry now (returns tokens freed)
    engine.reset_stats()

    freeze_loaded()  # once the models are loaded: the cycle collector skips them from now on (heap.py)
    with frozen_loaded(): ...  # the same for one block, then they can be freed again

finish is "eos", "stop" or "length". On the CPU a sequence's logits are the same bit for
bit whatever else is in its batch (ets/engine/invariant.py says how, and where not).
Seeds: sample j of a request that carries its own seed depends only on (that seed, j); of
one that does not, on (the call's seed, its index in the call's samples). Neither depends
on batching, cache hits or preemption, and a call of one request with seed s samples what
the request `(ids, n, s)` samples. When the
pool runs out, unlocked cache entries are evicted (LRU), then the youngest running
sequences are preempted and recomputed later; if locked handles fill the pool, the
newest handle is spilled, the path a search extends last (it becomes evictable and is
recomputed from its tokens when next extended; `spilled_handles` counts them). A call
never fails for lack of memory unless one sequence alone exceeds the pool (a ValueError
up front naming `kv_budget_tokens`).

`ets.policy.engine.EnginePolicy` is the search controller's `Policy` on this engine.

Layout (one step: engine -> scheduler.schedule -> runner -> attention -> sampling ->
scheduler.postprocess; the scheduler only plans and never sees the model):
    pool.py       KV tensors (kv_dtype)    allocator.py  free slots
    radix.py      prefix index (MatchResult, InsertResult)
    table.py      per-sequence slots       sequence.py   one request (Seq), a Chunk of it
    scheduler.py  admission, memory, the step's Plan, postprocess (no model)
    runner.py     one forward of a Plan's chunks
    compiled.py   that forward under torch.compile (compile="on"), attention an opaque op
    linears.py    the model's linear layers on oneDNN prepacked weights, on the CPU (prepack)
    hidden.py     the final norm's output, read in the forward (step embeddings)
    groups.py     the forward's sequences cut into groups of like shapes, attended apart
    attention.py  paged attention fn       cascade.py    shared-prefix decode attention
    workspace.py  reused gather buffers (decode keeps its gathered contexts across steps)
    invariant.py  the rules that keep a sequence's numbers independent of its batch-mates
    sampling.py   sampling, stop rules (StopStrings, shared with ets/policy/steps.py)
    prefix.py     shared prefixes of a call (and branch-point levels for a scorer)
    engine.py     the public API and the step loop
    heap.py       freeze_loaded / frozen_loaded: long-lived objects out of the cycle collector's
                  way, and the C heap keeping freed memory for the next step (keep_freed_memory)

Tokens of a call that several sequences share are computed once (prefix.py); samples of one
path decode with cascade attention, reading the path's KV once per step (cascade.py).
Decode gathers each sequence's context from the pool once, into buffers kept across steps
(at most the pool's size again, scratch, not counted as KV): a step writes only its new
tokens there, and sequences that finish are compacted out (workspace.py). Sequences of
very different lengths (many searches in flight) are attended in groups of like shapes, so
few pad to the batch's longest (groups.py).
"""

from ets.engine.engine import DEFAULT_KV_TOKENS, DEFAULT_MAX_BATCH_TOKENS, Continuation, Engine, Request
from ets.engine.heap import freeze_loaded, frozen_loaded
from ets.engine.scheduler import EngineMemoryError

__all__ = ["DEFAULT_KV_TOKENS", "DEFAULT_MAX_BATCH_TOKENS", "Continuation", "Engine", "EngineMemoryError", "Request",
           "freeze_loaded", "frozen_loaded"]
