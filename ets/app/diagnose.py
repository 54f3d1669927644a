"""Where a run's votes went: why a search that finds right answers still picks wrong ones.

`ets diagnose` reads results files (JSONL of `ets run`) and prints, per file, what its
trajectories say beyond the accuracy. On the demo task these figures explained the
ranking of the demo's W=64 runs (docs/results.md): a tree search raises the
right answer's share of its trajectories, but it extends whatever the PRM scores well, so
weighted by those scores its leading wrong answer gains nearly as much; best-of-N's wrong
answers scatter and lose the vote one by one.

Shares are of a problem's trajectories, counted, and weighted by their scores as the
weighted vote weighs them (a share of the answered trajectories' total score); a
trajectory without an answer (cut at the depth or token cap) holds no answer's share.

Which rule read the answers (`answer_rule` of each trajectory: boxed, marker, hashes,
last_number; none where no rule found one) is counted over the run's trajectories: a
policy that ends in prose shows most of its answers read by `last_number`. Records written
before the field existed count as unknown.

What the vote needs of the scores is that, within a problem, right trajectories outscore
wrong ones: the ROC AUC of the run's aggregated scores, right against wrong answered
trajectories, per problem that has both, says how often they do (0.5: a coin). A PRM's
step-level AUC pooled over problems and depths can be high while this is low.
"""

from __future__ import annotations

from collections import Counter
from statistics import mean
from typing import Any, Mapping, Sequence

from ets.answers.accuracy import nothing_to_grade
from ets.answers.aggregate import aggregate, group_answers
from ets.answers.grading import is_equivalent
from ets.app.terminal import plural
from ets.config import ANSWER_RULES
from ets.demo.metrics import mean_auc_within

PREFIX_STEPS = 3
# What `answer_rules` counts besides the rules: trajectories no rule read an answer from,
# and those of records written before the rule was recorded.
NO_ANSWER, UNKNOWN = "none", "unknown"


def diagnose(records: Sequence[Mapping[str, Any]], prefix_steps: int = PREFIX_STEPS) -> dict[str, Any]:
    """The figures of one run (records as `ets run` writes them), each over its problems.
    Answers are grouped by equivalence, as the vote groups them; a group's weight is the
    sum of its trajectories' scores under the run's own aggregation (the weighted vote's).
    Problems without a ground truth are left out (counted as `ungraded` when there are any)."""
    ungraded = sum(r["ground_truth"] is None for r in records)
    records = [r for r in records if r["ground_truth"] is not None]
    if not records:
        from ets.app.evaluate import EvalError

        raise EvalError(nothing_to_grade(ungraded, "diagnose"))
    solved = vote_right = right_leads = 0
    shares: dict[str, list[float]] = {k: [] for k in ("right", "top_wrong", "right_weight", "top_wrong_weight")}
    answers, prefixes, cut, steps = [], [], [], []
    separation = []  # per problem: its answered trajectories' (right?, score)
    rules: Counter[str] = Counter()  # trajectories by the rule that read their answer
    for r in records:
        trajs = r["trajectories"]
        scores = [aggregate(t["step_scores"], r.get("aggregation", "last")) for t in trajs]
        right = right_weight = top_wrong = top_wrong_weight = 0.0
        groups = group_answers([t["answer"] for t in trajs])
        is_right = [False] * len(trajs)
        for group in groups:
            count, weight = len(group), sum(scores[i] for i in group)
            if r["ground_truth"] is not None and is_equivalent(trajs[group[0]]["answer"], r["ground_truth"]):
                right, right_weight = right + count, right_weight + weight
                for i in group:
                    is_right[i] = True
            else:
                top_wrong, top_wrong_weight = max(top_wrong, count), max(top_wrong_weight, weight)
        answered = [i for group in groups for i in group]
        separation.append(([is_right[i] for i in answered], [scores[i] for i in answered]))
        n, total = len(trajs) or 1, sum(scores[i] for group in groups for i in group) or 1.0
        solved += right > 0
        vote_right += right > 0 and bool(r["correct"])
        right_leads += right > top_wrong
        for key, value in (("right", right / n), ("top_wrong", top_wrong / n), ("right_weight", right_weight / total),
                           ("top_wrong_weight", top_wrong_weight / total)):
            shares[key].append(value)
        answers.append(len(groups))
        prefixes.append(len({tuple(t["steps"][:prefix_steps]) for t in trajs}))
        cut.append(sum(t["finish"] == "max_depth" for t in trajs))
        steps.extend(len(t["steps"]) for t in trajs)
        rules.update((t["answer_rule"] or NO_ANSWER) if "answer_rule" in t else UNKNOWN for t in trajs)
    problems = len(records)
    score_auc, problems_right_and_wrong = mean_auc_within(separation)
    return {
        "problems": problems,
        **({"ungraded": ungraded} if ungraded else {}),
        "accuracy": sum(bool(r["correct"]) for r in records) / problems,
        "solved": solved,
        "vote_right_when_solved": vote_right / solved if solved else None,  # nothing to pick from
        **{f"{key}_share": mean(values) for key, values in shares.items()},
        "right_leads": right_leads,
        "score_auc_within": score_auc,
        "problems_right_and_wrong": problems_right_and_wrong,
        "distinct_answers": mean(answers),
        "distinct_prefixes": mean(prefixes),
        "prefix_steps": prefix_steps,
        "cut_at_depth": mean(cut),
        "steps": mean(steps) if steps else 0.0,
        "trajectories": mean(len(r["trajectories"]) for r in records),
        "answer_rules": {rule: rules[rule] for rule in (*ANSWER_RULES, NO_ANSWER, UNKNOWN) if rules[rule]},
    }


def diagnose_table(runs: Sequence[tuple[str, Mapping[str, float]]]) -> list[str]:
    """Markdown: one column per (name, `diagnose` figures), one row per figure."""
    def row(label: str, cell) -> str:
        return f"| {label} | " + " | ".join(cell(d) for _, d in runs) + " |"

    k = runs[0][1]["prefix_steps"]
    # over seeds each problem is searched once per seed: the rows count searches
    unit = "searches (problem x seed)" if any(d.get("seeds", 1) > 1 for _, d in runs) else "problems"
    return [
        "| | " + " | ".join(name for name, _ in runs) + " |",
        "|---" * (len(runs) + 1) + "|",
        row(unit, lambda d: f"{d['problems']}" + (f" ({d['seeds']} seeds)" if d.get("seeds", 1) > 1 else "")
            + (f" (+{d['ungraded']} without a ground truth, left out)" if d.get("ungraded") else "")),
        row("accuracy (the run's vote)", lambda d: f"{d['accuracy']:.1%}"),
        row(f"{unit} with a right trajectory", lambda d: f"{d['solved']} ({d['solved'] / d['problems']:.1%})"),
        row("... of those, the vote picks the right answer",
            lambda d: "n/a" if d["vote_right_when_solved"] is None else f"{d['vote_right_when_solved']:.1%}"),
        row("share of a problem's trajectories that are right (mean)", lambda d: f"{d['right_share']:.1%}"),
        row("share of its most common wrong answer (mean)", lambda d: f"{d['top_wrong_share']:.1%}"),
        row("... weighted by score: the right answer's share", lambda d: f"{d['right_weight_share']:.1%}"),
        row("... weighted by score: the leading wrong answer's", lambda d: f"{d['top_wrong_weight_share']:.1%}"),
        row(f"{unit} where the right answer outnumbers every wrong one",
            lambda d: f"{d['right_leads']} ({d['right_leads'] / d['problems']:.1%})"),
        row("scores of right against wrong trajectories within a problem (ROC AUC, mean)",
            lambda d: "n/a" if d["score_auc_within"] is None else
            f"{d['score_auc_within']:.3f} ({plural(d['problems_right_and_wrong'], 'problem')})"),
        row("distinct answers per problem", lambda d: f"{d['distinct_answers']:.1f}"),
        row(f"distinct {k}-step prefixes per problem", lambda d: f"{d['distinct_prefixes']:.1f} of {d['trajectories']:.0f}"),
        row("trajectories cut at the depth cap per problem", lambda d: f"{d['cut_at_depth']:.1f}"),
        row("steps per trajectory (mean)", lambda d: f"{d['steps']:.1f}"),
        *(row(_RULE_LABELS.get(rule, f"answer read by {rule} (share of trajectories)"),
              lambda d, rule=rule: _rule_share(d, rule))
          for rule in _rules_seen(runs)),
    ]


_RULE_LABELS = {NO_ANSWER: "no answer (share of trajectories)",
                UNKNOWN: "answer rule not recorded (records of an older ets)"}


def _rules_seen(runs: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """The answer rules any run counted, in the order of ANSWER_RULES, then none, unknown."""
    seen = {rule for _, d in runs for rule in d.get("answer_rules", {})}
    return [rule for rule in (*ANSWER_RULES, NO_ANSWER, UNKNOWN) if rule in seen]


def _rule_share(d: Mapping[str, Any], rule: str) -> str:
    """A rule's share of the run's trajectories, and their number."""
    counts = d.get("answer_rules", {})
    count = counts.get(rule, 0)
    return f"{count / sum(counts.values()):.1%} ({count})" if counts else "n/a"
