"""The result record of one searched problem: one JSON line of `ets run`'s output.

Fields (documented for users in docs/outputs.md, "The record"):
  id, question, ground_truth        the problem
  method, width, aggregation, vote  how it was searched and how the answer was chosen
  answer, correct                   the chosen answer and whether it is equivalent to the truth
                                    (null when the problem has no ground truth)
  trajectories                      every completed trajectory that answers (beam with
                                    sort_completed: the W best): steps, step_scores, answer,
                                    answer_rule: the rule that read the answer (boxed,
                                    marker, hashes, last_number; null: none did, or the
                                    trajectory does not vote), tokens, finish: why it ended, one of
                                      answer      its last step gives a final answer
                                      eos         the policy ended it (EOS)
                                      context     its path filled the model's context
                                                  (policy.max_context or max_position_embeddings)
                                      max_tokens  it generated max_tokens tokens
                                      max_depth   it took max_depth steps
  generated_tokens                  tokens the policy generated for this problem (all nodes,
                                    and the lookahead rollouts')
  lookahead_tokens                  only with search.lookahead: the rollouts' share of them
  prompt_tokens                     tokens of the prompt the search started from
  prompt_truncated_from             only when the prompt was cut to fit the model's context
                                    (policy.prompt_overflow=truncate): its length before
  kv_size, kv_size_steps            the paper's KV-size metric (prompt counted), summed over
                                    selection steps, and per step
  kv_size_ref, kv_size_ref_steps    the same metric as the ETS code computes it (prompt as 2
                                    tokens, its selections only; ets/loop/rules.py)
  num_nodes, depth                  size of the search tree
  wall_time                         seconds from admission to finish (problems run concurrently)
  strategy_metrics                  counters from the strategy (e.g. ETS solver fallbacks)
  tree                              the whole search tree (only with save_trees: true)
  rescored_from                     only in records of `ets rescore` (ets/app/rescore.py): the
                                    best-of-N results file whose samples were scored again
"""

from __future__ import annotations

from typing import Any

from ets.config import SearchConfig
from ets.data import Problem
from ets.loop.rules import counted_tokens
from ets.tree import Node, SearchTree


def _finish_reason(node: Node, config: SearchConfig) -> str:
    if node.terminal:
        return "answer" if node.tags.get("finish") != "eos" else "eos"
    if node.tags.get("finish") == "context":
        return "context"
    if counted_tokens(node, config) >= config.max_tokens:
        return "max_tokens"
    return "max_depth"


def result_record(
    *,
    problem: Problem,
    tree: SearchTree,
    completed: list[Node],
    answers: list[str | None],
    answer_rules: list[str | None],
    chosen: str | None,
    correct: bool | None,
    kv_size_steps: list[int],
    wall_time: float,
    config: SearchConfig,
    strategy_metrics: dict[str, Any],
    save_tree: bool = False,
    kv_size_ref_steps: list[int] | None = None,
    lookahead_tokens: int | None = None,
) -> dict[str, Any]:
    record = {
        "id": problem.id,
        "question": problem.question,
        "ground_truth": problem.answer,
        **({"fields": problem.fields} if problem.fields else {}),
        "method": config.method,
        "width": config.width,
        "aggregation": config.aggregation,
        "vote": config.vote,
        "answer": chosen,
        "correct": correct if correct is None else bool(correct),
        "trajectories": [
            {
                "steps": node.step_texts(),
                "step_scores": node.step_scores(),
                "answer": answer,
                "answer_rule": rule,
                "tokens": node.cum_tokens,
                "finish": _finish_reason(node, config),
            }
            for node, answer, rule in zip(completed, answers, answer_rules)
        ],
        "generated_tokens": sum(n.num_tokens for n in tree.nodes[1:]) + (lookahead_tokens or 0),
        **({} if lookahead_tokens is None else {"lookahead_tokens": lookahead_tokens}),
        "prompt_tokens": tree.root.num_tokens,
        "kv_size": sum(kv_size_steps),
        "kv_size_steps": kv_size_steps,
        **({} if kv_size_ref_steps is None else {"kv_size_ref": sum(kv_size_ref_steps),
                                                   "kv_size_ref_steps": kv_size_ref_steps}),
        "num_nodes": len(tree.nodes),
        "depth": max(n.depth for n in tree.nodes),
        "wall_time": round(wall_time, 4),
        "strategy_metrics": strategy_metrics,
    }
    if "truncated_from" in tree.root.tags:
        record["prompt_truncated_from"] = tree.root.tags["truncated_from"]
    if save_tree:
        record["tree"] = tree.to_dict()
    return record
