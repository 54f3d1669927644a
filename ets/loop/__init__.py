"""The search loop: many problems at once over one policy and one reward model.

    controller.py   `SearchLoop`: a run of searches, round by round (admit, expand, score,
                    select, finish); `search(...)`, its one-call form; `RunStats`, `LoopResult`
    admission.py    `KVAdmission`: how many problems may be in flight under the policy's KV capacity
    record.py       the result record of one problem (one JSON line of `ets run`)

Imported lazily (the controller loads the strategies and the reward interface).
"""

__all__ = ["KVAdmission", "LoopResult", "RunStats", "SearchLoop", "search"]


def __getattr__(name: str):
    if name == "KVAdmission":
        from ets.loop.admission import KVAdmission

        return KVAdmission
    if name in ("LoopResult", "RunStats", "SearchLoop", "search"):
        from ets.loop import controller

        return getattr(controller, name)
    raise AttributeError(f"module 'ets.loop' has no attribute {name!r}")
