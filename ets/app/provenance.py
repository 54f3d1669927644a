"""What made a results file: the resolved config and fingerprints of the files it read.

    made = describe(config)            # {"compared": {...}, "recorded": {...}, ...}
    differences(old["compared"], made["compared"])  # ["search.width: 4 -> 8", ...]

Written beside the results as `<name>.config.json`. Two parts:

compared   every key that changes a problem's result, flattened (`search.width`,
           `policy.prompt_template`, `reward.options`, ...): the whole search section
           (method, width, sampling, seed, aggregation, vote, ETS weights, embedder ...),
           the policy (model, backend, dtype, templates, step delimiter; the device as its
           type only, `cuda:1` -> `cuda`; the rule that draws its tokens, `policy.sampler`,
           which an output of an older ets is taken to have used the old rule for; and
           `search.answer_extraction`, which it is taken to have read answers without the
           last number with), the reward (name, model, options). A key added to
           a config class later is compared by default: a false refusal costs a flag, a
           silent mix costs a paper.
recorded   kept for the reader, never compared: the output path, `concurrency`, `rounds`,
           `save_trees` and `torch_threads` (a problem's result does not depend on what
           else is in flight, nor on how many threads compute it),
           the ETS recipe's `num_threads` and preset names (a preset is compared as the
           keys it set), the recipe keys that have no effect here (`no_effect`),
           `policy.kv_budget_tokens`, `policy.max_batch_tokens`, `policy.memory_fraction`,
           `policy.reward_memory_share` and the reward options of
           those names (memory and batching, not results), the full device name, the
           model paths, all reward options, and the data: its path, limit, layout keys
           and SHA-256.

The data is not compared as keys: adding problems to a data file, or raising
`data.limit`, must resume and search only the new ones. It is compared problem by
problem instead (`check_records`): every record already in the output must be one of
this run's problems (same id) with the same question and ground truth.

A model is compared by what it is, not where it lies: a local folder by a fingerprint of
its files (path, size and SHA-256 of the contents of each file up to 64 MiB; above that, of
the size, the modification time and 16 blocks of 64 KiB spread over the file, so
multi-GB weights cost 1 MiB of reading; a copied folder of such weights counts as
changed); a `tiny:` model or a hub name by its name.

A plug-in (a reward or a strategy of the user's own, `module:attr`) is compared by its
code too: `reward.plugin_source` / `search.plugin_source`, a SHA-256 of the Python files of
its top-level package (or of its one module file; ets/plugins.py), so an edited plug-in is
a changed config, not a resume. An output written before plug-ins were fingerprinted
has no such key and resumes as it did.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from ets.app.terminal import plural
from ets.config import MARKED_ANSWER_RULES, RunConfig
from ets.data import Problem
from ets.plugins import source_fingerprint

FORMAT = 1
NOT_COMPARED = frozenset({
    "output", "concurrency", "rounds", "save_trees", "torch_threads",
    "policy.kv_budget_tokens", "policy.max_batch_tokens", "policy.memory_fraction", "policy.reward_memory_share",
    # the ETS recipe keys: num_threads does nothing here, and a preset's effect is compared
    # as the policy and reward keys it set
    "num_threads", "policy_model_type", "reward_model_type",
})
# A PRM's own pool and batch size (rewards/step_tag.py): memory, not scores.
REWARD_OPTIONS_NOT_COMPARED = frozenset({"kv_budget_tokens", "max_batch_tokens"})
FULL_HASH_BYTES = 64 << 20
BLOCK, BLOCKS = 64 << 10, 16


def describe(config: RunConfig) -> dict[str, Any]:
    """The provenance of a run of `config` (raises ModelLoadError for a missing model path)."""
    flat = _flatten(dataclasses.asdict(config))
    compared: dict[str, Any] = {}
    recorded: dict[str, Any] = {}
    for key, value in flat.items():
        if key.startswith(("data.", "no_effect.")) or key in NOT_COMPARED:
            recorded[key] = value
        else:
            compared[key] = value
    recorded["policy.device"] = config.policy.device
    compared["policy.device"] = str(config.policy.device).split(":")[0]
    recorded["policy.model"] = config.policy.model
    compared["policy.model"] = model_identity(config.policy.model, "policy.model")
    recorded["reward.options"] = config.reward.options
    compared["reward.options"] = {k: v for k, v in config.reward.options.items() if k not in REWARD_OPTIONS_NOT_COMPARED}
    recorded["reward.model"] = config.reward.model
    compared["reward.model"] = model_identity(config.reward.model or config.policy.model,
                                              "reward.model" if config.reward.model else "policy.model")
    compared["policy.sampler"] = _sampler(config.policy.backend)
    for section, module in plugin_modules(config).items():
        compared[f"{section}.plugin_source"] = source_fingerprint(module)
        recorded[f"{section}.plugin_module"] = module
    if config.data.path and Path(config.data.path).is_file():
        recorded["data.path"] = str(Path(config.data.path).resolve())
        recorded["data.sha256"] = _file_sha256(str(Path(config.data.path).resolve()))
    from ets import __version__

    return {"format": FORMAT, "ets_version": __version__,
            "compared": _jsonable(compared), "recorded": _jsonable(recorded)}


def plugin_modules(config: RunConfig) -> dict[str, str]:
    """The modules of the config's plug-ins (a reward or a strategy of the user's own, by
    `module:attr` or by a name registered to one), by section."""
    from ets.rewards.registry import plugin_module as reward_module
    from ets.strategies.base import plugin_module as strategy_module

    found = {"reward": reward_module(config.reward.name), "search": strategy_module(config.search.method)}
    return {section: module for section, module in found.items() if module is not None}


def _sampler(backend: str | None, engine_rule: str | None = None) -> str:
    """What draws a run's tokens: vLLM its own; the engine and the hf backend the engine's
    rule (ets/engine/sampling.py; `engine_rule`: another than today's)."""
    from ets.engine.sampling import STREAMS

    return "vllm's own" if backend == "vllm" else engine_rule or STREAMS


def _before(key: str, old: dict[str, Any]) -> Any:
    """The value of a compared key that an older ets did not write, where what it did then
    is known (else None: not compared)."""
    if key == "policy.sampler":  # recorded since the sampler's change (ets/engine/sampling.py)
        from ets.engine.sampling import STREAMS_BEFORE

        return _sampler(old.get("policy.backend"), STREAMS_BEFORE)
    if key == "policy.chat_template":  # before chat templates, every prompt was raw text
        return False
    if key == "search.answer_extraction":  # before the key, answers were read without the last number
        return list(MARKED_ANSWER_RULES)
    return None


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`key: old -> new` for each compared key whose value changed. A key that only one
    side has (written by an older or newer ets) is not compared, unless what the older ets
    did is known (`_before`: the sampler, raw-text prompts, the answer rules)."""
    out = []
    for key in new:
        was = old[key] if key in old else _before(key, old)
        if was is not None and was != new[key]:
            out.append(f"{key}: {short(was)} -> {short(new[key])}")
    return out


def check_records(records: Sequence[dict[str, Any]], problems: Sequence[Problem]) -> str | None:
    """Why `records` (an output's) are not results of `problems`, or None if they are."""
    by_id = {p.id: p for p in problems}
    foreign = [r["id"] for r in records if r["id"] not in by_id]
    if foreign:
        return (f"{len(foreign)} of the {plural(len(records), 'problem')} it holds are not among this run's problems "
                f"(e.g. id {foreign[0]!r}; another data file, a smaller data.limit, or a problem "
                "removed from the data)")
    for r in records:
        p = by_id[r["id"]]
        if r.get("question") != p.question or r.get("ground_truth") != p.answer:
            part = "question" if r.get("question") != p.question else "ground truth"
            return f"problem {p.id!r} has another {part} in the data than when it was searched"
    return None


def model_identity(name: str, key: str | None = None) -> str:
    """What a model is: `files sha256:...` for a local folder or file, else its name (`key`:
    the config key that names it, for the error where it names nothing)."""
    from ets.models.load import check_model_exists

    if name.startswith("tiny:"):
        return name  # built from code by name
    path = Path(name).expanduser()
    if path.exists():
        return "files " + fingerprint(path)
    check_model_exists(name, key)  # a path that does not exist: ModelLoadError
    return name  # a hub name


def fingerprint(path: Path) -> str:
    """`sha256:<16 hex>` of a file, or of every file of a folder (hidden ones skipped)."""
    if path.is_file():
        files = [(path.name, path)]
    else:
        files = sorted(
            (str(p.relative_to(path)), p) for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
    h = hashlib.sha256()
    for rel, p in files:
        st = p.stat()
        h.update(f"{rel}\0{st.st_size}\0{_file_digest(str(p.resolve()), st.st_size, st.st_mtime_ns)}\n".encode())
    return "sha256:" + h.hexdigest()[:16]


@functools.lru_cache(maxsize=1024)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    """Keyed by size and mtime, so a sweep fingerprints each file once."""
    if size <= FULL_HASH_BYTES:
        return _file_sha256(path)
    h = hashlib.sha256(f"{size}\0{mtime_ns}".encode())
    with open(path, "rb") as fh:
        for k in range(BLOCKS):  # first block at 0, last ending at the file's end
            fh.seek(k * (size - BLOCK) // (BLOCKS - 1))
            h.update(fh.read(BLOCK))
    return h.hexdigest()


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _flatten(config: dict[str, Any]) -> dict[str, Any]:
    """`section.key` for the sections' keys; a dict value (reward.options) stays one key,
    so an option removed shows as a change."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    """As it reads back from JSON (tuples become lists), so old and new compare equal."""
    return json.loads(json.dumps(values, default=str))


def short(value: Any) -> str:
    """A value as a difference names it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
