"""The import names of the selection strategies, the reward models and the ETS program:
`ets.strategies`, `ets.rewards` and `ets.lp`, and their old top-level names `search`,
`rewards` and `lp`.

The repository keeps the three packages in folders beside ets/ (search/, rewards/, lp/).
An installed ets holds them inside ets/ (pyproject.toml's `package-dir`: a wheel copies
them there, an editable install maps the names to the folders), so there the names resolve
by themselves. Run from a checkout without installing (PYTHONPATH=the repository), they
would not: `CheckoutFinder` maps each to its folder beside the ets/ that was imported, and
only to it. It is one finder for three exact names rather than the repository added to
`ets.__path__`, which would also make `ets.tests`, `ets.scripts` and a second copy of ets
itself (`ets.ets`) importable, and could not give the folder search/ the name
`ets.strategies` (`ets.search` is the function that runs searches).

The old names (`import rewards`, `from search.beam import BeamSearch`) still work, with a
DeprecationWarning, and give the very same module objects as the new ones: a second copy
would hold a second strategy registry, and classes that fail `isinstance` against their
twins. `OldNameFinder` answers an old name only where nothing else does (an installed ets
has no top-level packages of these names) or where what would answer is this project's
own folder (a checkout on sys.path), so a user's own `rewards.py` on the path still wins
over the old name. In a checkout, the folder itself may be imported by its old name before
ets is: its `__init__` then calls `take_old_name`.

Nothing of the project is imported here: ets/__init__.py installs the finders first.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from importlib.machinery import ModuleSpec, PathFinder
from importlib.util import spec_from_file_location
from pathlib import Path

# Each package's name under ets -> its folder in the repository, which is also its old
# top-level name.
MOVED = {"strategies": "search", "rewards": "rewards", "lp": "lp"}
NEW_NAME = {folder: name for name, folder in MOVED.items()}  # old top-level name -> name under ets

_ETS_DIR = Path(__file__).resolve().parent
_ROOT = _ETS_DIR.parent


def in_checkout() -> bool:
    """The packages sit beside ets/ (a repository), not inside it (an installed ets)."""
    return all((_ROOT / folder / "__init__.py").is_file() and not (_ETS_DIR / name).exists()
               for name, folder in MOVED.items())


class CheckoutFinder:
    """`ets.strategies`, `ets.rewards`, `ets.lp` -> the folders search/, rewards/, lp/
    beside ets/. Their modules are then found in the package's `__path__` as usual."""

    _ets_namespace = True

    def find_spec(self, fullname: str, path=None, target=None) -> ModuleSpec | None:
        parent, _, name = fullname.rpartition(".")
        if parent != "ets" or name not in MOVED:
            return None
        folder = _ROOT / MOVED[name]
        return spec_from_file_location(fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


class OldNameFinder:
    """`search`, `search.beam`, `rewards`, ... -> the modules `ets.strategies`,
    `ets.strategies.beam`, `ets.rewards`, ... (the same objects), with a DeprecationWarning."""

    _ets_namespace = True

    def find_spec(self, fullname: str, path=None, target=None) -> ModuleSpec | None:
        top, dot, rest = fullname.partition(".")
        if top not in NEW_NAME:
            return None
        new_top = f"ets.{NEW_NAME[top]}"
        if not dot:
            found = PathFinder.find_spec(fullname, path)
            if found is not None and not _is_project_folder(found, top):
                return None  # a module of the user's by that name: theirs, as Python would have it
        elif sys.modules.get(top) is None or sys.modules.get(top) is not sys.modules.get(new_top):
            return None  # a submodule of a package that is not ours
        return ModuleSpec(fullname, _OldNameLoader(new_top + dot + rest), is_package=not dot)


class _OldNameLoader:
    """Loads an old name as the module of its new name (imported first if need be)."""

    def __init__(self, new_name: str):
        self.new_name = new_name

    def create_module(self, spec: ModuleSpec):
        module = importlib.import_module(self.new_name)
        _warn(spec.name, self.new_name, stacklevel=2)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # The import system has just set `__spec__` to the old name's spec (it sets nothing
        # else that the module already has): the module keeps its own.
        module.__spec__ = self._own_spec


def take_old_name(old_name: str) -> None:
    """For search/, rewards/ or lp/ while it is being imported by its old top-level name
    (from a checkout on sys.path, before ets): that name becomes the package under ets
    (`ets.strategies`, `ets.rewards`, `ets.lp`) itself, which the import of the old name
    then returns."""
    new_name = f"ets.{NEW_NAME[old_name]}"
    module = importlib.import_module(new_name)
    _warn(old_name, new_name, stacklevel=3)
    sys.modules[old_name] = module


def install() -> None:
    """Put the finders first on `sys.meta_path` (once; the checkout's only in a checkout):
    before the other finders, so an editable install of another checkout cannot answer
    for the folders beside this ets/."""
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "_ets_namespace", False)]
    finders = [OldNameFinder()] + ([CheckoutFinder()] if in_checkout() else [])
    sys.meta_path[:0] = finders


def _is_project_folder(spec: ModuleSpec, folder: str) -> bool:
    return spec.origin is not None and Path(spec.origin).resolve() == _ROOT / folder / "__init__.py"


def _warn(old_name: str, new_name: str, stacklevel: int) -> None:
    warnings.warn(
        f"the module {old_name!r} is now {new_name!r}: import {new_name} instead "
        f"(the old name goes in a later release)",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )
