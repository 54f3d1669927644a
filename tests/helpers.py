"""Small builders shared by the tests: trees with chosen scores (no models), the `ets run`
of the tiny config with its one-line-error check, and scripts/ loaded as modules."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from ets.config import SearchConfig
from ets.tree import Node, SearchTree
from ets.strategies import Frontier


def tree_with_children(scores: list[float], prompt_tokens: int = 5, step_tokens: int = 3) -> SearchTree:
    """A root with one child per score, each child `step_tokens` long."""
    tree = SearchTree("Q", list(range(prompt_tokens)))
    for i, s in enumerate(scores):
        child = tree.add_child(tree.root, f"step {i}", [100 + i] * step_tokens)
        child.score = s
    return tree


def add_children(tree: SearchTree, parent: Node, scores: list[float], step_tokens: int = 3) -> list[Node]:
    out = []
    for s in scores:
        child = tree.add_child(parent, f"step {len(tree)}", [7] * step_tokens)
        child.score = s
        out.append(child)
    return out


def frontier(tree: SearchTree, candidates: list[Node], width: int, completed: list[Node] | None = None, depth: int | None = None) -> Frontier:
    completed = completed or []
    return Frontier(
        tree=tree,
        candidates=candidates,
        completed=completed,
        remaining=width - len(completed),
        width=width,
        depth=depth if depth is not None else candidates[0].depth,
    )


def config(**kw) -> SearchConfig:
    return SearchConfig(**kw)


def random_tokens(n: int, seed: int) -> list[int]:
    """n token ids below 256 (byte symbols of the tiny tokenizer), fixed by `seed`."""
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"


def run_cli(*argv):
    """`ets run --quiet --config configs/tiny.yaml ARGV...`: its exit code."""
    from ets.app.cli import main

    return main(["run", "--quiet", "--config", str(TINY), *argv])


def one_line_error(capsys, code):
    """The one `ets: error: ...` line a failed command printed (exit code 2 asserted)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("ets: error:"), err
    return err[0]


def cluster_table(shared: list[int], cluster_of: list[int], n_slots: int, gen: torch.Generator) -> torch.Tensor:
    """A slot table [B, 64] of distinct random slots, except that the members of one
    cluster (neighbours with the same `cluster_of`) share the slots of their first
    `shared` positions: decode sequences as cascade attention sees them."""
    table = torch.randperm(n_slots, generator=gen)[: len(shared) * 64].view(len(shared), 64)
    for b in range(1, len(shared)):
        if cluster_of[b] == cluster_of[b - 1]:
            table[b, : shared[b]] = table[b - 1, : shared[b]]
    return table


def load_script(name: str):
    """scripts/<name>.py imported as a module (scripts/ is not a package), to call its functions."""
    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
