"""Expansions in flight together: the engine's submit / step / collect, and the search loop
that runs each problem's round on its own with them (`SearchLoop(in_flight=...)`). A
problem is collected as soon as its own sequences end, and its records are those of whole
rounds. Real tiny models on the engine."""

from __future__ import annotations

import json

import pytest

import ets
from ets.engine import Engine
from ets.loop.controller import SearchLoop

PROMPT_A, PROMPT_B = [1, 5, 9, 13, 17], [1, 5, 9, 40, 41, 42]


@pytest.fixture(scope="module")
def engine():
    return Engine.from_pretrained("tiny:llama", kv_budget_tokens=4096)


def tokens(conts):
    return [[c.token_ids for c in per_request] for per_request in conts]


def test_a_short_expansion_is_collected_while_a_long_one_decodes_on(engine):
    alone_a = engine.expand([(PROMPT_A, 3, 11)], max_new_tokens=4, ignore_eos=True)
    alone_b = engine.expand([(PROMPT_B, 2, 12)], max_new_tokens=20, ignore_eos=True)
    engine.release([c.handle for per in alone_a + alone_b for c in per])
    engine.evict()

    a = engine.submit([(PROMPT_A, 3, 11)], max_new_tokens=4, ignore_eos=True)
    b = engine.submit([(PROMPT_B, 2, 12)], max_new_tokens=20, ignore_eos=True)
    order = []
    while not (a.done and b.done):
        order.extend(engine.step())
    assert order == [a, b]
    got_a, got_b = engine.collect(a), engine.collect(b)
    with pytest.raises(RuntimeError, match="collected already"):
        engine.collect(a)
    # the same tokens as each alone: a sequence's draws depend on its own seed only
    assert tokens(got_a) == tokens(alone_a) and tokens(got_b) == tokens(alone_b)
    engine.release([c.handle for per in got_a + got_b for c in per])
    engine.check()
    assert engine.stats()["locked_kv_tokens"] == 0


def test_a_ticket_taken_back_before_it_ran_leaves_nothing_behind(engine):
    ticket = engine.submit([(PROMPT_A, 2, 3)], max_new_tokens=5)
    engine.withdraw(ticket)
    assert not ticket.done and engine.step() == []
    engine.check()
    assert engine.stats()["locked_kv_tokens"] == 0


def test_an_error_in_a_forward_fails_every_ticket_and_leaks_no_lock(engine, monkeypatch):
    a = engine.submit([(PROMPT_A, 2, 3)], max_new_tokens=2, ignore_eos=True)
    b = engine.submit([(PROMPT_B, 2, 4)], max_new_tokens=30, ignore_eos=True)
    while not a.done:
        engine.step()
    forward = engine.runner.forward

    def broken(*args, **kwargs):
        raise RuntimeError("device lost")

    monkeypatch.setattr(engine.runner, "forward", broken)
    with pytest.raises(RuntimeError, match="device lost"):
        engine.step()
    monkeypatch.setattr(engine.runner, "forward", forward)
    assert b.failed and not b.done
    # `a` ended before the error and was handed out by that step: still the caller's
    assert a.done
    engine.release([c.handle for per in engine.collect(a) for c in per])
    with pytest.raises(RuntimeError, match="failed"):
        engine.collect(b)
    engine.check()
    assert engine.stats()["locked_kv_tokens"] == 0
    assert tokens(engine.expand([(PROMPT_A, 1, 3)], max_new_tokens=2))  # the engine still works


def test_a_synchronous_call_waits_for_no_expansion_in_flight(engine):
    ticket = engine.submit([(PROMPT_A, 1, 3)], max_new_tokens=3)
    with pytest.raises(RuntimeError, match="in flight"):
        engine.generate([PROMPT_B], max_new_tokens=2)
    while not ticket.done:
        engine.step()
    engine.release([c.handle for per in engine.collect(ticket) for c in per])
    engine.check()


CONFIG = {"width": 4, "max_depth": 3, "max_step_tokens": 8, "max_tokens": 40, "temperature": 1.0,
          "policy": {"model": "tiny:llama", "backend": "engine", "step_delimiter": "\n"},
          "reward": {"name": "step_tag", "model": "tiny:llama", "options": {"backend": "engine"}}}
QUESTIONS = [f"Ann has {i + 2} pens and buys {3 * i + 1} more. How many pens now?" for i in range(5)]


def comparable(records):
    out = []
    for r in records:
        r = dict(r, strategy_metrics={k: v for k, v in r["strategy_metrics"].items() if not k.endswith("_seconds")})
        r.pop("wall_time")
        out.append(r)
    return out


@pytest.mark.parametrize("method, extra", [
    ("best_of_n", []), ("beam", []), ("dvts", []), ("rebase", []), ("ets", []),
    ("ets", ["embedder=policy", "cluster_threshold=0.05"]), ("ets", ["embedder=prm", "cluster_threshold=0.05"]),
])
def test_rounds_in_flight_give_the_records_of_whole_rounds(method, extra):
    config = ets.load_config(CONFIG, [f"method={method}", *extra])
    policy = ets.build_policy(config)
    reward = ets.build_reward(config, policy)
    problems = [ets.Problem(q, answer=str(4 * i + 3)) for i, q in enumerate(QUESTIONS)]
    runs = {}
    for in_flight in (False, True):
        loop = SearchLoop(problems, policy, reward, config.search, concurrency=4, in_flight=in_flight)
        assert loop.in_flight is in_flight
        result = loop.run()
        runs[in_flight] = (comparable(result.records), result.stats.rounds)
        policy.release_all()
        policy.engine.evict()
    assert runs[True][0] == runs[False][0]
    # in flight, problems finish their rounds at different times: more, smaller rounds
    assert runs[True][1] >= runs[False][1]


def test_lookahead_keeps_whole_rounds():
    config = ets.load_config(CONFIG, ["method=beam", "lookahead=1"])
    policy = ets.build_policy(config)
    reward = ets.build_reward(config, policy)
    assert not SearchLoop([], policy, reward, config.search).in_flight
    with pytest.raises(ValueError, match="lookahead"):
        SearchLoop([], policy, reward, config.search, in_flight=True)


def test_ets_run_takes_rounds_whole_or_in_flight_and_writes_the_same_records(tmp_path):
    from tests.helpers import run_cli

    common = ["policy.backend=engine", "reward.options.backend=engine", "data.limit=3", "width=3", "max_depth=3"]
    whole, flying = tmp_path / "whole.jsonl", tmp_path / "flying.jsonl"
    assert run_cli(*common, "rounds=whole", f"output={whole}") == 0
    assert run_cli(*common, f"output={flying}") == 0  # in_flight: the default
    read = [[{k: v for k, v in json.loads(line).items() if k != "wall_time"} for line in p.read_text().splitlines()]
            for p in (whole, flying)]
    assert read[0] == read[1] and len(read[0]) == 3


def test_a_search_stopped_by_an_error_leaves_no_expansion_running():
    config = ets.load_config(CONFIG, ["method=rebase"])
    policy = ets.build_policy(config)
    reward = ets.build_reward(config, policy)
    calls = []

    def failing(questions, trajectories):
        calls.append(len(questions))
        if len(calls) == 3:
            raise RuntimeError("the reward server went away")
        return reward.score(questions, trajectories)

    problems = [ets.Problem(q) for q in QUESTIONS]
    with pytest.raises(RuntimeError, match="went away"):
        SearchLoop(problems, policy, failing, config.search, concurrency=4).run()
    engine = policy.engine
    assert not engine._tickets and not engine.scheduler.has_work
    engine.check()
    # the same policy searches again, as if nothing had happened
    again = SearchLoop(problems[:2], policy, reward, config.search, concurrency=2).run()
    assert len(again.records) == 2
