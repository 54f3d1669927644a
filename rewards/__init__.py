"""Process reward models: the plug-in interface (`ProcessRewardModel`) and the built-ins.

    from ets.rewards import build_reward
    prm = build_reward(config.reward, config.policy, engine)   # by name, see registry.py
    scores = prm(questions, trajectories)                     # validated scores[q][t][s]

Built-ins: `step_tag` (Math-Shepherd convention), `token_classification`
(Qwen2.5-Math-PRM convention), `value_head` (Skywork-style scalar heads, Llemma readings),
`chat_judgement` (RLHFlow convention), `verifier` (the demo task's exact checker); any
`module:attr`; any name an installed package registers under the `ets.rewards` entry points.
"""

if __name__ == "rewards":  # this folder imported by its old name (a checkout on sys.path): it is ets.rewards
    from ets.namespace import take_old_name

    take_old_name(__name__)

from ets.rewards.base import ProcessRewardModel, RewardError, validate_scores
from ets.rewards.registry import BUILTINS, ENTRY_POINT_GROUP, build_reward, known_rewards, register_reward, resolve_reward

__all__ = [
    "BUILTINS",
    "ENTRY_POINT_GROUP",
    "ProcessRewardModel",
    "RewardError",
    "build_reward",
    "known_rewards",
    "register_reward",
    "resolve_reward",
    "validate_scores",
]
