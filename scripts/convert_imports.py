#!/usr/bin/env python
"""Rewrite imports of `search`, `rewards` and `lp` to their names under ets:
`ets.strategies` (the folder search/), `ets.rewards`, `ets.lp`. The old top-level names
still work, with a DeprecationWarning. `ets.search` is the function that runs searches.

    python scripts/convert_imports.py                  # the whole repository
    python scripts/convert_imports.py my_reward.py plugins/

What changes, in .py, .md, .yaml/.yml, .sh and .toml files:
  - import statements, at the start of a line (also after `>>>` or `...`) or right after a
    quote or `;` (a `python -c "..."` snippet):
        from search.beam import X    ->  from ets.strategies.beam import X
        from rewards.base import X   ->  from ets.rewards.base import X
        import search                ->  import ets.strategies as search   (binds `search` as before)
        import rewards               ->  from ets import rewards
        import lp.solve as s         ->  import ets.lp.solve as s
  - `module:attr` strings that name a module of the three packages:
        rewards.step_tag:StepTagPRM  ->  ets.rewards.step_tag:StepTagPRM
  - in .py files, a string literal that is a dotted path into one of them ("rewards.verifier",
    "search.beam.BeamSearch"); not the config keys that read alike ("search.width", and
    "search.compat", which is a key as well as a module).
Nothing else: the word "search" in prose, in names or in paths (search/beam.py) stays. A
name already under ets is never matched again, so running the script twice changes nothing.
A file that holds the text `# convert_imports: leave this file` is left as it is: the old
names on purpose (this script, whose examples are above; the tests of the old names).
An `import` of several names at once that includes one of the three is listed for a hand
edit. Prints each file it changed and each line it left for a hand edit.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The old top-level name (the folder in the repository) -> the name under ets.
NEW_NAME = {"search": "strategies", "rewards": "rewards", "lp": "lp"}
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml"}
LEAVE_MARK = "# convert_imports: leave this file"
SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "build", "dist", "node_modules", ".gpu", "checkpoints"}

PKG = r"(?P<pkg>search|rewards|lp)"
DOTTED = r"(?P<rest>(?:\.[A-Za-z_]\w*)*)"
# Where an import statement may start: a line's start (after a doctest prompt), or a quote
# or `;` of a one-line snippet.
START = r"(?P<pre>^[ \t]*(?:(?:>>>|\.\.\.)[ \t]+)?|[\"';][ \t]*)"
END = r"(?=[ \t]*(?:$|#|;|\\n|[\"']))"

FROM_RE = re.compile(START + r"from[ \t]+" + PKG + DOTTED + r"(?P<imp>[ \t]+import\b)", re.M)
IMPORT_AS_RE = re.compile(START + r"import[ \t]+" + PKG + DOTTED + r"(?P<alias>[ \t]+as[ \t]+\w+)" + END, re.M)
IMPORT_RE = re.compile(START + r"import[ \t]+" + PKG + DOTTED + END, re.M)
MULTI_RE = re.compile(START + r"import[ \t]+[\w. \t]*,[\w., \t]*", re.M)
MODULE_ATTR_RE = re.compile(r"(?<![\w./\-])" + PKG + r"(?P<rest>(?:\.[A-Za-z_]\w*)+)(?=:[A-Za-z_])")
STRING_RE = re.compile(r"(?<![\w.])(?P<q>[\"'])" + PKG + r"(?P<rest>(?:\.[A-Za-z_]\w*)+)(?P=q)")

def module_names() -> dict[str, set[str]]:
    """Each package's modules and subpackages, by their name inside the package."""
    names = {}
    for pkg in NEW_NAME:
        folder = ROOT / pkg
        names[pkg] = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        names[pkg] |= {p.parent.name for p in folder.glob("*/__init__.py")}
    return names


def search_config_keys() -> set[str]:
    """The fields of SearchConfig, read from its source: "search.<field>" is a config key."""
    tree = ast.parse((ROOT / "ets" / "config" / "sections.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "SearchConfig":
            return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    return set()


MODULES = module_names()
CONFIG_KEYS = {"search": search_config_keys()}


def names_a_module(pkg: str, rest: str) -> bool:
    """`pkg` + `rest` (".step_tag", ".beam.BeamSearch") starts with a module of the package."""
    return rest.split(".")[1] in MODULES[pkg]


def new(pkg: str) -> str:
    return f"ets.{NEW_NAME[pkg]}"


def _import_plain(m: re.Match) -> str:
    """`import search` -> `import ets.strategies as search`; `import rewards` -> `from ets
    import rewards`; `import rewards.base` binds `rewards` and loads rewards.base: both."""
    pre, pkg, rest = m["pre"], m["pkg"], m["rest"]
    bind = f"from ets import {pkg}" if NEW_NAME[pkg] == pkg else f"import {new(pkg)} as {pkg}"
    if not rest:
        return f"{pre}{bind}"
    joiner = "\n" + pre if pre.strip() == "" else "; "
    return f"{pre}import {new(pkg)}{rest}{joiner}{bind}"


def convert_text(text: str, suffix: str) -> tuple[str, list[str]]:
    """`text` with its imports and module paths under ets; and the lines to edit by hand."""
    text = FROM_RE.sub(lambda m: f"{m['pre']}from {new(m['pkg'])}{m['rest']}{m['imp']}", text)
    text = IMPORT_AS_RE.sub(lambda m: f"{m['pre']}import {new(m['pkg'])}{m['rest']}{m['alias']}", text)
    text = IMPORT_RE.sub(_import_plain, text)
    text = MODULE_ATTR_RE.sub(
        lambda m: f"{new(m['pkg'])}{m['rest']}" if names_a_module(m["pkg"], m["rest"]) else m[0], text)
    if suffix == ".py":
        def string(m: re.Match) -> str:
            parts = m["rest"].split(".")[1:]
            is_config_key = len(parts) == 1 and parts[0] in CONFIG_KEYS.get(m["pkg"], set())
            if names_a_module(m["pkg"], m["rest"]) and not is_config_key:
                return f"{m['q']}{new(m['pkg'])}{m['rest']}{m['q']}"
            return m[0]
        text = STRING_RE.sub(string, text)
    by_hand = []
    for m in MULTI_RE.finditer(text):
        statement = m[0][len(m["pre"]):]
        listed = [n.strip().split(" ")[0] for n in statement[len("import"):].split(",")]
        if any(n.split(".")[0] in NEW_NAME for n in listed):
            line = text.count("\n", 0, m.start()) + 1
            by_hand.append(f"{line}: {text.splitlines()[line - 1].strip()}")
    return text, by_hand


def files(paths: list[Path]):
    for path in paths:
        if path.is_file():
            yield path
            continue
        for p in sorted(path.rglob("*")):
            if p.is_file() and p.suffix in SUFFIXES and not SKIP_DIRS & set(p.relative_to(path).parts[:-1]):
                yield p


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or [ROOT]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(f"convert_imports: error: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    for path in files(paths):
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if LEAVE_MARK in text:
            continue
        new_text, by_hand = convert_text(text, path.suffix)
        if new_text != text:
            path.write_text(new_text)
            print(f"converted {path}")
        for line in by_hand:
            print(f"{path}:{line}  <- several names in one import: convert by hand")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
