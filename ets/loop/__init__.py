"""The search loop: many problems at once over one policy and one reward model.

    controller.py   a run of searches: admit, expand, score, select, finish, round by round
    admission.py    how many problems may be in flight under the policy's KV capacity
    record.py       the result record of one problem (one JSON line of `ets run`)
"""
