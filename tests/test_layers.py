"""Imports run downwards only (docs/ARCHITECTURE.md, "Layers").

Every `import` in the project's packages, at module level or inside a function, is read
with `ast`; a module may import its own package or a package of a lower layer, never one of
its own layer or above. The engine in particular knows nothing of the search: it may use
the model loaders and nothing else of the project.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ets.namespace import MOVED

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A package may import only packages of strictly lower layers (and itself).
LAYERS: list[tuple[str, ...]] = [
    ("ets.config", "ets.tree", "ets.demo", "ets.models", "ets.paths", "ets.namespace"),  # foundations: nothing of the project
    ("ets.answers", "ets.engine", "ets.plugins"),             # answer math; the KV-cache engine; plug-in loading
    ("ets.data", "ets.lp"),                                   # problems; the ETS integer program
    ("ets.strategies", "ets.rewards", "ets.policy"),          # strategies, PRMs, policy backends
    ("ets.loop",),                                            # the search loop
    ("ets",),                                                 # the `ets.search` facade
    ("ets.app",),                                             # the commands
    ("ets.__main__",),                                        # `python -m ets`
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
FOLDER_PACKAGE = {folder: f"ets.{name}" for name, folder in MOVED.items()}  # search/ -> ets.strategies, ...
FOLDERS = ("ets", *FOLDER_PACKAGE)
PACKAGES = ("ets", *FOLDER_PACKAGE.values())


def owner(module: str) -> str | None:
    """The layer entry a dotted module belongs to (longest matching prefix)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in RANK:
            return prefix
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts[0] != "ets":
        parts = [*FOLDER_PACKAGE[parts[0]].split("."), *parts[1:]]
    return ".".join(parts)


def imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            # `from ets import tree` imports the module ets.tree, not the facade
            targets = [f"{name}.{a.name}" for a in node.names] if name in PACKAGES else [name]
            out += [(node.lineno, t) for t in targets]
    return out


def project_modules() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def test_every_project_module_has_a_layer():
    missing = [module_name(p) for p in project_modules() if owner(module_name(p)) is None]
    assert not missing, f"add these to LAYERS: {missing}"


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Imports in `source` (the text of `module`) that run upwards or sideways."""
    mine = owner(module)
    bad = []
    for line, target in imported(ast.parse(source), module, is_package):
        theirs = owner(target)
        if theirs is None or theirs == mine:
            continue  # outside the project, or inside its own package
        if RANK[theirs] >= RANK[mine]:
            bad.append(f"{line}: {module} ({mine}, layer {RANK[mine]}) imports {target} ({theirs}, layer {RANK[theirs]})")
    return bad


@pytest.mark.parametrize("path", project_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_downwards(path: Path):
    bad = violations(path.read_text(), module_name(path), path.name == "__init__.py")
    assert not bad, f"{path.relative_to(ROOT)}: imports that run upwards or sideways:\n" + "\n".join(bad)


def test_the_check_flags_upward_and_sideways_imports():
    """The check itself, on made-up sources: a lower layer importing a higher one (also
    inside a function, also relative) and a package importing one of its own layer."""
    assert violations("def f():\n    from ets.loop.controller import search\n", "ets.engine.engine")
    assert violations("from ..policy import Step\n", "ets.engine.engine")
    assert violations("from ets import rewards\n", "ets.strategies.beam")  # same layer: sideways
    assert not violations("from ets.engine.pool import KVPool\nimport torch\n", "ets.engine.engine")
    assert not violations("from ets.tree import Node\n", "ets.strategies.beam")


def test_the_engine_knows_nothing_of_the_search():
    """Stronger than the layer rule: the engine imports nothing of the project but its own
    modules and the model loaders (not even the configs)."""
    allowed = {"ets.engine", "ets.models"}
    bad = []
    for path in sorted((ROOT / "ets" / "engine").rglob("*.py")):
        for line, target in imported(ast.parse(path.read_text()), module_name(path), path.name == "__init__.py"):
            if owner(target) not in (None, *allowed):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not bad, "\n".join(bad)
