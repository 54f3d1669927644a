"""The search tree: one per problem, the only state shared by strategies and models.

A node is one reasoning step. The root holds the formatted prompt (its `token_ids` are
the prompt tokens); every other node holds the text and tokens the policy produced
between two step delimiters, the PRM's score of that step, and a link to its parent.

Invariants (checked by `SearchTree.check`):
- node ids are dense: `tree.nodes[i].id == i`, the root is node 0;
- `child.depth == parent.depth + 1` and `child in parent.children`;
- `cum_tokens` counts the *generated* tokens on the path (the prompt excluded). The ETS
  public code counts its prompt as 2 tokens there (`ets.config.REFERENCE_PROMPT_TOKENS`),
  which `search.compat: ets_code` adds back when it compares against `max_tokens`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator


@dataclass(eq=False)
class Node:
    id: int
    parent: Node | None
    text: str
    token_ids: list[int]
    depth: int
    cum_tokens: int
    score: float | None = None
    terminal: bool = False
    children: list[Node] = field(default_factory=list)
    # Free-form per-strategy annotations (e.g. DVTS subtree label); exported with the tree.
    tags: dict[str, Any] = field(default_factory=dict)
    # The step's embedding from a model's hidden states (ETS's `search.embedder: policy` or
    # `prm`: a unit float32 vector, set by the search loop); not exported.
    embedding: Any = field(default=None, repr=False)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    def path(self) -> list[Node]:
        """Nodes from the root to this node, both included."""
        out: list[Node] = []
        node: Node | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]

    def steps(self) -> list[Node]:
        """The step nodes of this trajectory (the path without the root)."""
        return self.path()[1:]

    def path_token_ids(self) -> list[int]:
        """Prompt tokens followed by every step's tokens: what the policy continues."""
        ids: list[int] = []
        for node in self.path():
            ids.extend(node.token_ids)
        return ids

    def step_texts(self) -> list[str]:
        return [n.text for n in self.steps()]

    def step_scores(self) -> list[float]:
        return [float(n.score) for n in self.steps() if n.score is not None]

    def __repr__(self) -> str:
        return f"Node(id={self.id}, depth={self.depth}, score={self.score}, terminal={self.terminal})"


class SearchTree:
    """All nodes of one problem's search, in creation order."""

    def __init__(self, prompt: str, prompt_token_ids: list[int]):
        self.root = Node(id=0, parent=None, text=prompt, token_ids=list(prompt_token_ids), depth=0, cum_tokens=0)
        self.nodes: list[Node] = [self.root]

    def add_child(self, parent: Node, text: str, token_ids: list[int], terminal: bool = False) -> Node:
        child = Node(
            id=len(self.nodes),
            parent=parent,
            text=text,
            token_ids=list(token_ids),
            depth=parent.depth + 1,
            cum_tokens=parent.cum_tokens + len(token_ids),
            terminal=terminal,
        )
        parent.children.append(child)
        self.nodes.append(child)
        return child

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def check(self) -> None:
        """Raise AssertionError if a structural invariant is broken."""
        assert self.nodes and self.nodes[0] is self.root and self.root.parent is None
        for i, node in enumerate(self.nodes):
            assert node.id == i, f"node id {node.id} at index {i}"
            if node.parent is not None:
                assert node.depth == node.parent.depth + 1, f"node {i}: depth"
                assert node in node.parent.children, f"node {i}: not among its parent's children"
                assert node.cum_tokens == node.parent.cum_tokens + node.num_tokens, f"node {i}: cum_tokens"

    # ------------------------------------------------------------------ export
    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": [
                {
                    "id": n.id,
                    "parent": None if n.parent is None else n.parent.id,
                    "depth": n.depth,
                    "text": n.text,
                    "num_tokens": n.num_tokens,
                    "cum_tokens": n.cum_tokens,
                    "score": n.score,
                    "terminal": n.terminal,
                    **({"tags": n.tags} if n.tags else {}),
                }
                for n in self.nodes
            ]
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def to_networkx(self):
        """A `networkx.DiGraph` with an edge parent -> child and every field as node data."""
        import networkx as nx

        graph = nx.DiGraph()
        for record in self.to_dict()["nodes"]:
            graph.add_node(record["id"], **{k: v for k, v in record.items() if k != "id"})
            if record["parent"] is not None:
                graph.add_edge(record["parent"], record["id"])
        return graph


def kv_size(nodes: Iterable[Node], prompt_tokens: int | None = None) -> int:
    """The paper's KV-size metric for one selection step.

    The number of tokens on the union of the root-to-node paths of `nodes`, each shared
    ancestor counted once and the prompt (the root's tokens) counted: the ETS public code
    leaves the prompt out by mistake (docs/algorithms.md). `prompt_tokens` counts the root
    as that many tokens instead: `ets.config.REFERENCE_PROMPT_TOKENS` (2) gives the ETS
    code's own figure (the keys of its tokenizer's output, not the prompt's tokens).
    """
    seen: set[int] = set()
    total = 0
    for node in nodes:
        cur: Node | None = node
        while cur is not None and cur.id not in seen:
            seen.add(cur.id)
            total += cur.num_tokens if cur.parent is not None or prompt_tokens is None else prompt_tokens
            cur = cur.parent
    return total
