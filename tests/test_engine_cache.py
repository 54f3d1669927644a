"""The cache: locks, releases, eviction, preemption, and the accounting that reports them."""

import pytest
import torch

from ets.engine import Engine
from ets.engine.radix import RadixTree
from ets.models.tiny import build_tiny_model
from tests.helpers import random_tokens


@pytest.fixture(scope="module")
def model_tok():
    return build_tiny_model("llama", seed=2)



def _unique(paths: list[list[int]]) -> int:
    return len({tuple(p[: i + 1]) for p in paths for i in range(len(p))})


def test_radix_tree_split_lock_evict():
    tree = RadixTree("cpu")
    a = tree.insert([1, 2, 3, 4], torch.tensor([10, 11, 12, 13]))[0]
    b, existing = tree.insert([1, 2, 9], torch.tensor([20, 21, 22]))
    assert existing == 2 and tree.path_of(b) == [1, 2, 9]
    node, slots = tree.match([1, 2, 3, 7])
    assert slots.tolist() == [10, 11, 12] and tree.path_of(node) == [1, 2, 3]
    tree.lock(a)
    tree.check()
    assert tree.locked_tokens == 4 and tree.evictable_tokens == 1
    assert tree.evict(100).tolist() == [22]  # only the unlocked leaf goes
    tree.unlock(a)
    assert sorted(tree.evict(100).tolist()) == [10, 11, 12, 13]
    tree.check()
    assert tree.evictable_tokens == tree.locked_tokens == 0


def test_eviction_follows_lru_from_its_index():
    """evict() heaps the LRU index (unlocked leaves), not the whole tree: under random
    inserts, matches, locks and evictions it frees exactly what a full scan would, least
    recently used first, and the index always holds every unlocked leaf (check())."""
    import heapq
    import random

    rng = random.Random(0)
    tree, next_slot, locks = RadixTree("cpu"), 0, []
    for step in range(400):
        op = rng.random()
        if op < 0.45:
            path = [rng.randrange(4) for _ in range(rng.randrange(1, 8))]
            n_new = len(path) - tree.match(path).slots.numel()
            node, existing = tree.insert(path, torch.arange(next_slot, next_slot + len(path)))
            next_slot += len(path)
            if rng.random() < 0.3:
                tree.lock(node)
                locks.append(node)
        elif op < 0.65 and locks:
            tree.unlock(locks.pop(rng.randrange(len(locks))))
        elif op < 0.8:
            tree.match([rng.randrange(4) for _ in range(rng.randrange(1, 6))])
        else:
            want = rng.randrange(1, 6)
            # the full-scan rule: pop LRU unlocked leaves (parents join when they empty)
            heap = [n for n in tree.nodes() if not n.children and n.ref_count == 0]
            order, count, heap = [], 0, sorted(heap)
            heapq.heapify(heap)
            shadow = {id(n): len(n.children) for n in tree.nodes()}
            while heap and count < want:
                leaf = heapq.heappop(heap)
                order.extend(leaf.slots.tolist())
                count += len(leaf.key)
                parent = leaf.parent
                if parent is not tree.root:
                    shadow[id(parent)] -= 1
                    if shadow[id(parent)] == 0 and parent.ref_count == 0:
                        heapq.heappush(heap, parent)
            assert sorted(tree.evict(want).tolist()) == sorted(order)
        tree.check(locks=locks)


def test_tree_of_expansions_and_releases(model_tok):
    model, tok = model_tok
    engine = Engine(model, tok, kv_budget_tokens=2048)
    prompt = random_tokens(20, seed=1)
    live: dict[int, list[int]] = {}  # handle -> full path

    def expand(path, n):
        (conts,) = engine.expand([(path, n)], max_new_tokens=6, temperature=1.0, seed=len(live))
        engine.check()
        for c in conts:
            live[c.handle] = path + c.token_ids
        return conts

    def release(handles):
        engine.release(handles)
        engine.check()
        for h in handles:
            del live[h]

    def assert_accounting():
        # A handle locks its path except the last token (not computed yet).
        assert engine.stats()["locked_kv_tokens"] == _unique([p[:-1] for p in live.values()])

    first = expand(prompt, 4)
    assert_accounting()
    second = expand(live[first[0].handle], 3) + expand(live[first[2].handle], 2)
    assert_accounting()
    release([first[1].handle, first[3].handle, second[0].handle])
    assert_accounting()
    engine.evict()
    engine.check()
    assert engine.stats()["resident_kv_tokens"] == engine.stats()["locked_kv_tokens"]
    release(list(live))
    engine.evict()
    engine.check()
    stats = engine.stats()
    assert stats["resident_kv_tokens"] == stats["resident_kv_bytes"] == stats["locked_kv_tokens"] == 0


@pytest.mark.parametrize("compile_mode", ["off", "on"])
def test_workload_larger_than_pool(model_tok, compile_mode):
    """Evictions, preemptions and recomputation change no token and no logit, with the
    model's forward eager or compiled (ets/engine/compiled.py)."""
    model, tok = model_tok
    prompts = [random_tokens(30, seed=s) for s in range(4)] + [random_tokens(30, seed=0)[:25]]
    expected = Engine(model, tok, kv_budget_tokens=4096, compile="off").generate(prompts, max_new_tokens=12,
                                                                                 temperature=0)
    # 5 sequences of up to 42 tokens (~190 with sharing) through a pool of 64 tokens.
    small = Engine(model, tok, kv_budget_tokens=64, max_batch_tokens=40, compile=compile_mode)
    assert small.generate(prompts, max_new_tokens=12, temperature=0) == expected
    small.check()
    stats = small.stats()
    assert stats["preempted"] > 0 and stats["evicted_tokens"] > 0
    assert stats["peak_kv_tokens"] <= 64
    # scoring under the same pressure
    outs = small.score(prompts, [[29] if len(p) == 30 else [24] for p in prompts])
    small.check()
    for p, out in zip(prompts, outs):
        torch.testing.assert_close(out[0], model(torch.tensor([p])).logits[0, -1], atol=1e-4, rtol=0)


def test_pool_full_of_locks_spills_instead_of_failing(model_tok):
    model, tok = model_tok
    engine = Engine(model, tok, kv_budget_tokens=64)
    roomy = Engine(model, tok, kv_budget_tokens=4096)
    first = random_tokens(30, seed=3)
    (conts,) = engine.expand([(first, 1)], max_new_tokens=10, temperature=0)
    engine.check()  # 39 tokens locked, 25 free
    requests = [(random_tokens(3, seed=5), 1), (random_tokens(30, seed=4), 1)]
    # The long request cannot fit beside the lock: the (only) handle is spilled (its path
    # becomes evictable) and the call completes with the same tokens as a roomy pool.
    got = engine.expand(requests, max_new_tokens=10, temperature=0)
    want = roomy.expand(requests, max_new_tokens=10, temperature=0)
    assert [[c.token_ids for c in r] for r in got] == [[c.token_ids for c in r] for r in want]
    engine.check()
    assert engine.stats()["spilled_handles"] >= 1
    # A spilled handle is still released normally; extending its path recomputes it.
    engine.release([conts[0].handle])
    (again,) = engine.expand([(first + conts[0].token_ids, 1)], max_new_tokens=5, temperature=0)
    (ref,) = roomy.expand([(first + conts[0].token_ids, 1)], max_new_tokens=5, temperature=0)
    assert again[0].token_ids == ref[0].token_ids
    engine.release([c.handle for r in got for c in r] + [again[0].handle])
    assert engine.stats()["locked_kv_tokens"] == 0 and engine.stats()["live_handles"] == 0
    engine.check()
    with pytest.raises(KeyError):
        engine.release([conts[0].handle])  # twice is a caller bug, spilled or not
    with pytest.raises(ValueError, match="kv_budget_tokens"):
        engine.generate([random_tokens(60, seed=5)], max_new_tokens=10)


def _search_rounds(engine, rounds=5, width=8, step=8):
    """A search that keeps all its paths: every round extends each of them by one step, in
    the order the last round gave them, then releases their parents. Returns the paths."""
    requests, handles = [(random_tokens(16, seed=7), width, 0)], []
    for r in range(rounds):
        out = engine.expand(requests, max_new_tokens=step, temperature=1.0, ignore_eos=True)
        engine.release(handles)
        bases = [list(q[0]) for q in requests for _ in range(q[1])]
        conts = [c for o in out for c in o]
        handles = [c.handle for c in conts]
        requests = [(b + c.token_ids, 1, 100 + r * width + i) for i, (b, c) in enumerate(zip(bases, conts))]
    return [q[0] for q in requests]


def test_a_pool_short_of_a_search_spills_the_path_needed_last(model_tok):
    """Locks that outgrow the pool are spilled newest first: the next round extends the
    paths in the order it was given them, so the newest is needed last. Spilling the oldest
    lost the path extended first, whose recomputation pushed out the next one, and so on:
    in a pool of 3/4 of the search's final 336 tokens that recomputed 210 tokens for 320
    generated (1.63x a roomy pool's computation); newest first, 84 (1.25x)."""
    model, tok = model_tok
    roomy, short = Engine(model, tok, kv_budget_tokens=4096), Engine(model, tok, kv_budget_tokens=260)
    assert _search_rounds(short) == _search_rounds(roomy)
    assert short.stats()["spilled_handles"] > 0 and roomy.stats()["spilled_handles"] == 0
    assert short.stats()["computed_tokens"] <= 1.3 * roomy.stats()["computed_tokens"]
    short.check()


def test_a_call_whose_own_results_outgrow_the_pool_spills_them(model_tok):
    """8 sampled continuations of 9 new tokens each lock 10 + 8 * 9 = 82 tokens, more than
    the 64-token pool: the call spills its own finished results instead of failing, and
    returns what a roomy pool returns."""
    model, tok = model_tok
    engine = Engine(model, tok, kv_budget_tokens=64)
    roomy = Engine(model, tok, kv_budget_tokens=4096)
    request = [(random_tokens(10, seed=6), 8)]
    got = engine.expand(request, max_new_tokens=10, temperature=1.0, seed=0, ignore_eos=True)
    want = roomy.expand(request, max_new_tokens=10, temperature=1.0, seed=0, ignore_eos=True)
    assert [c.token_ids for c in got[0]] == [c.token_ids for c in want[0]]
    assert engine.stats()["spilled_handles"] >= 1
    engine.check()
    engine.release([c.handle for c in got[0]])
    assert engine.stats()["locked_kv_tokens"] == 0 and engine.stats()["live_handles"] == 0
    engine.check()


def test_shared_prefixes_are_computed_once(model_tok):
    model, tok = model_tok
    engine = Engine(model, tok, kv_budget_tokens=1024)
    base = random_tokens(20, seed=6)
    prompts = [base + [5, 6], base + [7], base[:10] + [9, 9, 9]]
    engine.generate(prompts, max_new_tokens=1, temperature=0)
    engine.check()
    assert engine.stats()["computed_tokens"] == _unique(prompts)  # each prompt token once
    (conts,) = engine.expand([(base, 4)], max_new_tokens=3, temperature=0)
    engine.check()
    # 4 samples of a cached path: each computes its path's last token, then 2 decode steps
    assert engine.stats()["computed_tokens"] == _unique(prompts) + 4 * 3


def test_the_step_clocks_count_forwards_and_split_their_time(model_tok):
    import time

    from ets.engine.engine import STEP_PHASES

    model, tok = model_tok
    engine = Engine(model, tok, kv_budget_tokens=1024)
    prompts = [random_tokens(12, seed=s) for s in range(3)]
    start = time.perf_counter()
    engine.generate(prompts, max_new_tokens=5, temperature=0, ignore_eos=True)
    wall = time.perf_counter() - start
    stats = engine.stats()
    # one forward for the prompts, then one per token after the first (a sampled token's KV waits)
    assert stats["steps"] == 5
    phases = [stats[f"{phase}_seconds"] for phase in STEP_PHASES]
    assert all(seconds > 0 for seconds in phases) and sum(phases) <= wall
    engine.reset_stats()
    assert all(engine.stats()[f"{phase}_seconds"] == 0 for phase in STEP_PHASES)
    engine.generate(prompts, max_new_tokens=2, temperature=0, ignore_eos=True)
    assert engine.stats()["steps"] == 2 and engine.stats()["model_seconds"] > 0


def test_the_pool_default_is_written_once(model_tok):
    from ets.engine import DEFAULT_KV_TOKENS, DEFAULT_MAX_BATCH_TOKENS

    model, tok = model_tok
    for engine in (Engine(model, tok), Engine.from_pretrained(model, kv_budget_tokens=None, tokenizer=tok)):
        assert engine.stats()["pool_kv_tokens"] == DEFAULT_KV_TOKENS
        assert engine.scheduler.max_batch_tokens == DEFAULT_MAX_BATCH_TOKENS
    assert Engine(model, tok, kv_budget_tokens=100).stats()["pool_kv_tokens"] == 100


def test_shared_prefixes_and_their_levels():
    from ets.engine.prefix import prefix_levels, shared_prefixes

    a, b, c = (1, 2, 3, 9), (1, 2, 3, 4, 5), (1, 2, 3, 4, 6)
    # the engine prefills the maximal ones, each within its paths' cacheable limits
    assert shared_prefixes([(a, 4, 1), (b, 5, 1), (c, 5, 1)]) == [(1, 2, 3, 4)]
    assert shared_prefixes([(a, 4, 1), (b, 2, 1), (c, 2, 1)]) == [(1, 2, 3)]
    assert shared_prefixes([(a, 3, 2), (b, 5, 1)]) == [(1, 2, 3)]   # two sequences on a
    assert shared_prefixes([((1, 2), 2, 1), ((3, 4), 2, 1)]) == []
    # a scorer wants every branch point, nested ones in later levels
    q, h = [1] * 8, [2] * 8
    seqs = [q + h + [3], q + h + [4], q + [5]]
    assert prefix_levels(seqs, min_tokens=8) == [[q], [q + h]]
    assert prefix_levels(seqs, min_tokens=9) == [[q + h]]
    assert prefix_levels([[1, 2], [3, 4]], min_tokens=1) == []


def test_an_interrupted_step_gives_back_its_slots(model_tok):
    """An error inside a forward (here a KeyboardInterrupt) leaves the cache consistent:
    the slots planned for that step go back to the pool, and the engine carries on."""
    model, tok = model_tok
    engine = Engine(model, tok, kv_budget_tokens=256)
    prompt = random_tokens(12, seed=8)
    want = Engine(model, tok, kv_budget_tokens=256).generate([prompt], max_new_tokens=6, temperature=0)
    forward, calls = engine.runner.forward, []

    def interrupted(chunks, hidden=False):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return forward(chunks, hidden)

    engine.runner.forward = interrupted
    with pytest.raises(KeyboardInterrupt):
        engine.generate([prompt], max_new_tokens=6, temperature=0)
    engine.check()
    assert engine.stats()["locked_kv_tokens"] == 0
    assert engine.generate([prompt], max_new_tokens=6, temperature=0) == want
    engine.check()


def test_token_ids_outside_the_vocabulary_are_refused_before_any_forward(model_tok):
    """Another model's token ids (a PRM fed the policy's), or text, are a clear error, not an
    index error mid-forward (on CUDA a device-side assert that ends the process); the
    engine is left as it was."""
    model, tok = model_tok
    engine = Engine(model, tok, kv_budget_tokens=256)
    vocab = model.get_input_embeddings().num_embeddings
    for bad in ([5, vocab, 7], [5, -1, 7]):
        with pytest.raises(ValueError, match="outside the model's vocabulary"):
            engine.generate([bad], max_new_tokens=2)
        with pytest.raises(ValueError, match="outside the model's vocabulary"):
            engine.score([bad], [[2]])
    with pytest.raises(ValueError, match=r"reads token ids, got strs .*tokenizer\(text\).input_ids"):
        engine.generate(["What is 2 + 3?"], max_new_tokens=2)
    assert engine.stats()["computed_tokens"] == 0
    engine.check()
    assert engine.generate([[5, vocab - 1, 7]], max_new_tokens=2, temperature=0)
