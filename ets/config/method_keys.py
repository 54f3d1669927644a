"""Which built-in strategy reads which search key, so that `ets run --check` can name the
keys a config sets that its method does not read (a config written for several methods,
as the demo's is, sets ETS's keys under `method: rebase` too: a note, not an error)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ets.config.embedders import cluster_cut

# key -> the built-in methods that read it; a key not here is read by every method.
READ_BY: dict[str, tuple[str, ...]] = {
    "softmax_temperature": ("rebase", "ets"),
    "fixed_width": ("beam", "dvts"),
    "filter_duplicates": ("beam",),
    "sort_completed": ("beam",),
    **{key: ("ets",) for key in ("lambda_c", "lambda_s", "cost", "final_pass", "cluster_threshold", "embedder",
                                 "kv_budget", "lp_relax", "lp_time_limit")},
}
BUILT_IN = ("best_of_n", "beam", "dvts", "rebase", "ets")
CLUSTERING = ("cluster_threshold", "embedder")  # read by ETS only while lambda_s > 0


def unread_keys_note(search: Any) -> str | None:
    """One line naming each key set away from its default that `search.method` does not
    read; None when there is none, or for a strategy that is not built in."""
    if search.method not in BUILT_IN:
        return None
    defaults = {f.name: f.default for f in fields(search)}
    defaults["cluster_threshold"] = cluster_cut(None, search.embedder, needed=False)
    unread = []
    for key, readers in READ_BY.items():
        if getattr(search, key) == defaults[key]:
            continue
        if search.method not in readers:
            unread.append(f"{key} ({', '.join(readers)})")
        elif key in CLUSTERING and search.lambda_s == 0:
            unread.append(f"{key} (ets with lambda_s > 0)")
    if not unread:
        return None
    return f"not read by {search.method}: {', '.join(unread)}; each is read by the method in brackets"
