"""ets.strategies, ets.rewards and ets.lp (the folders search/, rewards/, lp/): one package,
ets, in a checkout and installed; `ets.search` is the function that runs searches, alone.

A user's own `search.py`, `rewards.py` or `lp.py` on the path must not stand in for the
project's; the old top-level names still work (with a DeprecationWarning) and give the
very same module objects; a wheel installs the three inside ets/ and nothing at the top
level; scripts/convert_imports.py rewrites old imports and nothing else.

# convert_imports: leave this file  (it writes the old names on purpose)
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

from tests.helpers import load_script

from ets.namespace import MOVED

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = tuple(MOVED.values())  # also the old top-level names


def python(code: str, cwd: Path, pythonpath: list[Path] | None = None, exe: str = sys.executable):
    """Run `code` in a fresh interpreter; its last stdout line, read as JSON."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    done = subprocess.run([exe, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------- a user's modules of the same names

USER_REWARD = '''"""A user's own rewards.py: the reward plug-in of the run."""


def quarter(questions, trajectories):
    return [[[0.25 for _ in steps] for steps in trajs] for trajs in trajectories]
'''

RUN = """\
method: rebase
width: 2
max_step_tokens: 8
max_tokens: 16
policy:
  model: tiny:llama
  step_delimiter: "\\n"
reward:
  name: rewards:quarter
data:
  path: ./problems.jsonl
output: out.jsonl
"""


def test_a_users_search_rewards_and_lp_modules_do_not_stand_in_for_the_projects(tmp_path):
    """In the working directory and on PYTHONPATH: search.py and lp.py that fail when
    imported, and rewards.py, the run's own reward plug-in. `ets run --check` and a real
    run both work, and every step score is the user's reward."""
    (tmp_path / "rewards.py").write_text(USER_REWARD)
    for name in ("search", "lp"):
        (tmp_path / f"{name}.py").write_text(f'raise RuntimeError("the user\'s own {name}.py was imported")\n')
    (tmp_path / "run.yaml").write_text(RUN)
    (tmp_path / "problems.jsonl").write_text('{"question": "What is 2 + 3?", "answer": "#### 5"}\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    for extra in (["--check"], []):
        done = subprocess.run([sys.executable, "-m", "ets", "run", "--config", "run.yaml", *extra], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    (record,) = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    scores = [s for t in record["trajectories"] for s in t["step_scores"]]
    assert scores and set(scores) == {0.25}


# ------------------------------------------------------------- the old names: the same modules

IDENTITY = """
import json, sys, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    {old_imports}
import ets.lp, ets.rewards, ets.strategies
import ets.lp.solve, ets.rewards.base, ets.strategies.base, ets.strategies.beam
from ets.strategies.base import Strategy
new_name = {{"search": "ets.strategies", "rewards": "ets.rewards", "lp": "ets.lp"}}
old = {{name: sys.modules[name] for name in sys.modules if name.split(".")[0] in new_name}}
strategy = search.build(ets.config.SearchConfig(method="beam", width=4))
print(json.dumps({{
    "old": sorted(old),
    "same": {{name: module is sys.modules[new_name[name.split(".")[0]] + name[len(name.split(".")[0]):]]
             for name, module in old.items()}},
    "search_is_strategies": search is ets.strategies and search.beam is ets.strategies.beam,
    "registry_shared": search.available() == ets.strategies.available(),
    "isinstance": isinstance(strategy, Strategy),
    "specs_kept": [m.__spec__.name for m in (ets.strategies, ets.rewards, ets.lp, ets.strategies.beam)],
    "warned": sorted({{tuple(str(w.message).split("'")[1:4:2]) for w in caught if w.category is DeprecationWarning}}),
    "warned_at": sorted({{w.filename for w in caught if w.category is DeprecationWarning}}),
}}))
"""

OLD_IMPORTS = "import rewards; import search; from search.beam import Beam; import search.base; import lp.solve"


@pytest.mark.parametrize("first", ["old names first", "ets first"])
def test_old_names_give_the_same_modules_with_a_deprecation_warning(tmp_path, first):
    """From a checkout on PYTHONPATH, in a fresh interpreter: the old names imported before
    ets (the folders themselves are found by their old names) or after it (the old names
    resolve through ets). Either way each old name is the new module object: one
    strategy registry, one `Strategy` class. Each warns, at the line that imported it."""
    imports = OLD_IMPORTS if first == "old names first" else "import ets; " + OLD_IMPORTS
    got = python(IDENTITY.format(old_imports=imports), cwd=tmp_path, pythonpath=[ROOT])
    assert got["old"] == ["lp", "lp.solve", "rewards", "search", "search.base", "search.beam"]
    assert all(got["same"].values()), got["same"]
    assert got["search_is_strategies"] and got["registry_shared"] and got["isinstance"]
    assert got["specs_kept"] == ["ets.strategies", "ets.rewards", "ets.lp", "ets.strategies.beam"]
    assert got["warned"] == [["lp", "ets.lp"], ["lp.solve", "ets.lp.solve"], ["rewards", "ets.rewards"],
                             ["search", "ets.strategies"], ["search.base", "ets.strategies.base"],
                             ["search.beam", "ets.strategies.beam"]]
    assert got["warned_at"] == ["<string>"]


def test_ets_search_is_the_function_and_the_strategies_are_ets_strategies(tmp_path):
    """`ets.search` is a plain function, also once the strategies are imported, by any of
    their names, and it still runs searches; the strategies are `ets.strategies`, the
    same package however it is reached (also as an attribute of ets, imported on first use)."""
    got = python("""
        import inspect, json, sys
        import ets
        from ets.config import PolicyConfig
        from ets.policy.hf import HFPolicy

        lazy = "ets.strategies" not in sys.modules and ets.strategies is sys.modules["ets.strategies"]
        import ets.strategies.beam
        from ets import strategies
        import ets.strategies as aliased
        import search  # the old name
        from ets import search as function

        def half(questions, trajectories):
            return [[[0.5 for _ in steps] for steps in trajs] for trajs in trajectories]

        config = ets.SearchConfig(method="beam", width=2, max_step_tokens=4, max_tokens=8)
        policy = HFPolicy.from_config(PolicyConfig(model="tiny:llama", step_delimiter="\\n"), config)
        runs = ets.search_with(["What is 2 + 3?"], policy, half, config)
        print(json.dumps({
            "function": inspect.isfunction(ets.search) and function is ets.search,
            "lazy": lazy,
            "one_package": strategies is ets.strategies is aliased is search is sys.modules["ets.strategies"]
                           and strategies.beam is ets.strategies.beam and strategies.build is strategies.base.build,
            "not_a_package": [name for name in ("ets.search", "ets.search.beam") if name in sys.modules],
            "trajectories": len(runs[0]["trajectories"]),
        }))
    """, cwd=tmp_path, pythonpath=[ROOT])
    assert got == {"function": True, "lazy": True, "one_package": True, "not_a_package": [], "trajectories": 2}


def test_the_strategies_cannot_be_imported_as_ets_search(tmp_path):
    """`ets.search` is no package: importing a module under it fails plainly rather than
    finding the strategies by a second name (a second registry)."""
    got = python("""
        import json
        try:
            import ets.search.beam
            failed = None
        except ModuleNotFoundError as e:
            failed = str(e)
        print(json.dumps({"failed": failed}))
    """, cwd=tmp_path, pythonpath=[ROOT])
    assert got["failed"] is not None and "ets.search" in got["failed"]


# ------------------------------------------------------------- installed: all inside ets/

def test_the_package_list_names_every_package_folder():
    """pyproject.toml lists the packages by hand (search/ installs as ets.strategies, which
    no folder search can give): every folder with an __init__.py is there, by its ets name."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {"ets.strategies": "search", "ets.rewards": "rewards", "ets.lp": "lp"}
    folders = {package_name(init) for top in ("ets", *FOLDERS) for init in (ROOT / top).rglob("__init__.py")}
    assert set(config["packages"]) == folders


def package_name(init: Path) -> str:
    """ets/engine/__init__.py -> ets.engine; search/__init__.py -> ets.strategies."""
    parts = init.parent.relative_to(ROOT).parts
    if parts[0] == "ets":
        return ".".join(parts)
    new = {folder: name for name, folder in MOVED.items()}[parts[0]]
    return ".".join(("ets", new, *parts[1:]))


@pytest.mark.install
def test_a_wheel_installs_the_packages_inside_ets_and_nothing_at_the_top_level(tmp_path):
    """`pip install .` (a wheel, not editable) into a throwaway venv layered on this
    environment (no download): ets.strategies, ets.rewards and ets.lp are the venv's own
    copies inside ets/ (ets/strategies/, ets/rewards/, ets/lp/); `ets.search` is the function; the wheel installs no top-level search, rewards or lp (the old names are
    no shims: they resolve through ets once it is imported)."""
    source = tmp_path / "source"
    source.mkdir()
    for item in ROOT.iterdir():  # the build reads the files at the top and the package folders
        if item.is_file():
            shutil.copy2(item, source / item.name)
    for top in ("ets", *FOLDERS):
        shutil.copytree(ROOT / top, source / top, ignore=shutil.ignore_patterns("__pycache__"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False)  # pip: the environment's own
    exe = str(env_dir / ("Scripts" if os.name == "nt" else "bin") / "python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([exe, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
                           "--disable-pip-version-check", str(source)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = python("""
        import inspect, json, sys, sysconfig, warnings
        from importlib.metadata import distribution
        import ets, ets.namespace, ets.lp, ets.rewards, ets.strategies
        site = sysconfig.get_paths()["purelib"]
        files = [str(f) for f in distribution("ets").files]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import rewards, search.beam
        print(json.dumps({
            "where": {m.__name__: m.__file__[len(site):] for m in (ets.strategies, ets.rewards, ets.lp)},
            "tops": sorted({f.split("/")[0] for f in files if not f.startswith("..")}),
            "in_checkout": ets.namespace.in_checkout(),
            "function": inspect.isfunction(ets.search),
            "old_same": rewards is ets.rewards and search.beam is sys.modules["ets.strategies.beam"],
            "warned": sum(w.category is DeprecationWarning for w in caught),
        }))
    """, cwd=tmp_path, exe=exe)
    sep = os.sep
    assert got["where"] == {f"ets.{n}": f"{sep}ets{sep}{n}{sep}__init__.py" for n in MOVED}  # ets/strategies/, ...
    assert got["tops"] == ["ets", "ets-0.1.0.dist-info"]
    assert not got["in_checkout"] and got["function"]
    assert got["old_same"] and got["warned"] == 3


# ------------------------------------------------------------- the project uses the new names

def test_the_project_imports_its_packages_by_their_ets_names():
    """No module of the project, its tests or its scripts imports search, rewards or lp by
    the old name (`python scripts/convert_imports.py` rewrites them)."""
    old = []
    for top in ("ets", *FOLDERS, "tests", "scripts"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
                old += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                        if n.split(".")[0] in FOLDERS or n == "ets.search" or n.startswith("ets.search.")]
    assert not old, "old import names; run python scripts/convert_imports.py:\n" + "\n".join(old)


# ------------------------------------------------------------- the conversion script

BEFORE = '''\
"""Uses the search strategies: `search.build`, see search/beam.py."""
import search
import search.base
import rewards.base
import lp.solve as solve
from rewards.step_tag import StepTagPRM
from search.beam import BeamSearch
    >>> from search import build
code = "import lp; from search.beam import Beam"
name = "rewards.step_tag:StepTagPRM"
module = "rewards.verifier"
keys = ["search.width", "search.compat", "search.method", "rewards.md"]
search = lp = rewards = 1  # from search import nothing
import os, search
'''

AFTER = '''\
"""Uses the search strategies: `search.build`, see search/beam.py."""
import ets.strategies as search
import ets.strategies.base
import ets.strategies as search
import ets.rewards.base
from ets import rewards
import ets.lp.solve as solve
from ets.rewards.step_tag import StepTagPRM
from ets.strategies.beam import BeamSearch
    >>> from ets.strategies import build
code = "from ets import lp; from ets.strategies.beam import Beam"
name = "ets.rewards.step_tag:StepTagPRM"
module = "ets.rewards.verifier"
keys = ["search.width", "search.compat", "search.method", "rewards.md"]
search = lp = rewards = 1  # from search import nothing
import os, search
'''

def test_the_conversion_rewrites_imports_and_module_paths_only_and_once():
    convert = load_script("convert_imports")
    text, by_hand = convert.convert_text(BEFORE, ".py")
    assert text == AFTER
    assert by_hand == ["16: import os, search"]
    assert convert.convert_text(text, ".py")[0] == text  # a second run changes nothing
    yaml = "reward:\n  name: rewards.value_head:ValueHeadPRM  # see rewards.value_head\nsearch:\n  width: 4\n"
    assert convert.convert_text(yaml, ".yaml")[0] == yaml.replace("name: rewards.", "name: ets.rewards.")
