"""The scheduler plans without a model: packing, prefix hits, eviction, preemption, relief.

Each test drives a real `Scheduler` over a real allocator, radix tree and slot table (a
small pool), stands in for the model and the sampler with fixed outputs and tokens, and
checks the plan and the structures after every step.
"""

from collections import Counter

import pytest
import torch

from ets.engine.allocator import SlotAllocator
from ets.engine.radix import RadixTree
from ets.engine.sampling import SamplingParams, StopChecker
from ets.engine.scheduler import EngineMemoryError, Plan, Scheduler
from ets.engine.sequence import Seq
from ets.engine.table import SlotTable

TOKEN = 7  # what the stand-in sampler always picks


def scheduler(pool: int, max_batch_tokens: int = 64) -> Scheduler:
    return Scheduler(SlotAllocator(pool, "cpu"), RadixTree("cpu"), SlotTable("cpu"), max_batch_tokens, Counter())


def gen(tokens: list[int], max_new_tokens: int = 8, lock: bool = False) -> Seq:
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0)
    return Seq(list(tokens), len(tokens), params, StopChecker(params, set()), lock_result=lock)


def prefill(tokens: list[int]) -> Seq:
    """A prefill-only sequence: computes its tokens into the cache, returns nothing."""
    return Seq(list(tokens), len(tokens))


def check(s: Scheduler, held=()) -> None:
    """Every pool slot is free, cached or owned by a running sequence, exactly once; ref
    counts are what the running prefixes and `held` (locked results) imply."""
    s.tree.check(locks=[*held, *s.lock_targets()])
    every = torch.cat([s.allocator.free_slots(), s.tree.all_slots(), *s.in_use_slots()])
    assert sorted(every.tolist()) == list(range(s.allocator.num_slots))


def advance(s: Scheduler) -> Plan:
    """One step, with stand-in outputs ([len(keep), 1] zeros) and sampled tokens."""
    plan = s.schedule()
    s.postprocess(plan, [torch.zeros(len(c.keep), 1) for c in plan.chunks], [TOKEN] * len(plan.to_sample))
    return plan


def step(s: Scheduler, held=()) -> Plan:
    plan = advance(s)
    check(s, held)
    return plan


def run(s: Scheduler, seqs: list[Seq], held=()) -> None:
    """Run `seqs` to completion, checking after every step."""
    s.add(seqs)
    while s.has_work:
        advance(s)
        check(s, [*held, *(q.result_node for q in seqs if q.result_node is not None)])


def shape(plan: Plan) -> list[tuple[int, int]]:
    """(start, number of tokens) of each chunk."""
    return [(c.start, len(c.token_ids)) for c in plan.chunks]


def test_a_prefill_cut_to_one_token_beside_a_decode_is_not_sampled():
    # every chunk of the step is one token, but only the first is its sequence's last
    s = scheduler(pool=64, max_batch_tokens=2)
    a = gen(range(1, 3))
    s.add([a])
    step(s)                          # a prefills its 2 tokens and samples one
    b = gen(range(11, 16))           # 5 prompt tokens
    s.add([b])
    plan = step(s)
    assert plan.owners == [a, b] and shape(plan) == [(2, 1), (0, 1)]
    assert plan.to_sample == [0] and [c.decode for c in plan.chunks] == [True, False]
    assert plan.chunks[1].keep == [] and plan.chunks[1].token_ids == [11]
    assert s.table.rows[b.row, 0].item() not in s.allocator.free_slots().tolist()
    plan = step(s)                   # a decodes; b goes on with its prefill, a token a step
    assert shape(plan) == [(3, 1), (1, 1)] and plan.to_sample == [0]
    check(s)


def test_packs_oldest_first_decode_one_token_prefill_the_rest_chunked():
    s = scheduler(pool=64, max_batch_tokens=10)
    a, b = gen(range(1, 7)), gen(range(11, 19))   # 6 and 8 prompt tokens
    s.add([a, b])
    plan = step(s)
    # a (oldest) prefills whole; b gets what the 10-token budget leaves, and is not sampled
    assert plan.owners == [a, b] and shape(plan) == [(0, 6), (0, 4)] and plan.to_sample == [0]
    assert plan.chunks[0].keep == [5] and plan.chunks[1].keep == []
    assert plan.chunks[1].token_ids == [11, 12, 13, 14]
    assert (a.kv_len, b.kv_len) == (6, 4) and a.new_tokens == [TOKEN] and b.new_tokens == []
    plan = step(s)
    # a decodes its sampled token (1); b finishes its prefill (4) and samples
    assert shape(plan) == [(6, 1), (4, 4)] and plan.to_sample == [0, 1]
    assert plan.chunks[0].token_ids == [TOKEN]
    plan = step(s)
    assert shape(plan) == [(7, 1), (8, 1)]
    # each chunk's slots are recorded in its row at its positions, and are no one else's
    assert s.table.rows[a.row, 7].item() not in s.allocator.free_slots().tolist()
    assert not set(s.table.rows[a.row, :8].tolist()) & set(s.table.rows[b.row, :9].tolist())
    assert s.counters["computed_tokens"] == 6 + 4 + 1 + 4 + 2 and s.counters["generated_tokens"] == 5

    tight = scheduler(pool=64, max_batch_tokens=3)
    a, b = gen(range(1, 7)), gen(range(11, 19))
    tight.add([a, b])
    assert step(tight).owners == [a] and shape(step(tight)) == [(3, 3)]   # the oldest takes it all
    assert shape(step(tight)) == [(6, 1), (0, 2)]


def test_a_cached_prefix_is_reused_slot_for_slot():
    s = scheduler(pool=64)
    cached = prefill(range(1, 11))
    run(s, [cached])
    assert cached.finish is None and s.tree.evictable_tokens == 10 and s.allocator.n_used == 10
    slots = s.tree.match(list(range(1, 11))).slots
    longer, same = gen([*range(1, 11), 11, 12]), gen(range(1, 11))
    s.add([longer, same])
    plan = step(s)
    # `longer` computes only its 2 new tokens; `same` recomputes only its last token,
    # whose output it samples from; both read the cached prefix's own slots
    assert shape(plan) == [(10, 2), (9, 1)]
    assert s.counters["cache_hit_tokens"] == 10 + 9
    assert torch.equal(s.table.rows[longer.row, :10], slots)
    assert torch.equal(s.table.rows[same.row, :9], slots[:9])
    assert s.tree.locked_tokens == 10   # the prefix is locked while they run


def test_short_of_slots_evicts_the_least_recently_used_unlocked_entry():
    s = scheduler(pool=16)
    x, y, w = [1, 2, 3, 4], [11, 12, 13, 14], [21, 22, 23, 24]
    run(s, [prefill(x)])
    locked = s.tree.match(x).node
    s.tree.lock(locked)                      # x: the least recently used, but locked
    run(s, [prefill(y)], [locked])
    run(s, [prefill(w)], [locked])
    s.tree.match(w)                          # w: used again, so y is the oldest unlocked
    assert s.allocator.n_free == 4
    s.add([prefill(range(31, 39))])          # 8 tokens: 4 short
    plan = step(s, [locked])
    assert shape(plan) == [(0, 8)] and s.counters["evicted_tokens"] == 4
    assert s.tree.match(y).slots.numel() == 0                        # y went
    assert s.tree.match(x).slots.numel() == s.tree.match(w).slots.numel() == 4


def test_nothing_evictable_preempts_the_youngest_back_to_the_front_of_the_queue():
    s = scheduler(pool=16)
    a, b, c = gen(range(1, 7)), gen(range(11, 17)), gen(range(21, 27))
    s.add([a, b])
    step(s)                         # 12 slots used
    s.add([c])
    step(s)                         # 14: c waits, 6 tokens + 1 per runner > 2 free
    assert s.running == [a, b] and list(s.waiting) == [c]
    step(s)                         # 16: the pool is full, nothing is cached
    assert s.allocator.n_free == 0 and s.tree.evictable_tokens == 0
    plan = step(s)
    # a needs a slot: b (younger) is preempted; its 8 computed tokens go to the tree
    # unlocked and are evicted for a's slot; b waits ahead of c with its tokens kept
    assert plan.owners == [a] and s.counters["preempted"] == 1 and s.counters["evicted_tokens"] == 8
    assert list(s.waiting) == [b, c] and (b.row, b.kv_len, b.prefix_node) == (-1, 0, None)
    assert b.new_tokens == [TOKEN] * 3
    while s.has_work:
        step(s)
    assert [q.finish for q in (a, b, c)] == ["length"] * 3
    assert all(q.new_tokens == [TOKEN] * 8 for q in (a, b, c))


def test_the_youngest_waits_when_it_is_the_one_short():
    s = scheduler(pool=10)
    a, b = gen(range(1, 7), max_new_tokens=2), gen(range(11, 17), max_new_tokens=2)
    s.add([a, b])                    # b is admitted: its 6 tokens + 1 for a fit the 10 free
    plan = s.schedule()
    # a takes 6 slots; b cannot get 6 of the 4 left and gives way: a's chunk stays planned
    assert plan.owners == [a] and shape(plan) == [(0, 6)]
    assert s.counters["preempted"] == 1 and list(s.waiting) == [b] and s.running == [a]


def test_locks_filling_the_pool_ask_for_relief_then_raise():
    s = scheduler(pool=16)
    held = gen(range(1, 11), max_new_tokens=3, lock=True)
    run(s, [held])                   # its 12 computed tokens stay locked
    assert s.tree.locked_tokens == 12 and s.allocator.n_free == 4
    d = prefill(range(31, 39))       # 8 tokens
    s.add([d])
    assert shape(step(s, [held.result_node])) == [(0, 4)]   # alone: a partial chunk of what is free
    calls = []

    def relieve() -> bool:
        calls.append(1)
        s.tree.unlock(held.result_node)   # as the engine spills a handle
        return True

    s.relieve = relieve
    assert s.schedule() == Plan([], [], []) and len(calls) == 1   # nothing to run: asked for relief
    plan = step(s)
    assert shape(plan) == [(4, 4)] and s.counters["evicted_tokens"] >= 4 and d.kv_len == 8
    assert not s.has_work and len(calls) == 1

    s = scheduler(pool=16)
    held = gen(range(1, 11), max_new_tokens=3, lock=True)
    run(s, [held])
    s.relieve = lambda: False
    s.add([prefill(range(31, 39)), prefill(range(41, 45))])
    step(s, [held.result_node])
    with pytest.raises(EngineMemoryError, match="kv_budget_tokens"):
        s.schedule()
    s.abort()                         # gives back what the unfinished sequences held
    assert not s.has_work
    check(s, [held.result_node])
    assert s.allocator.n_free == 4 and s.tree.locked_tokens == 12
