"""The demo's `verifier` reward and its dial (the exact checker blurred to a chosen AUC, with
the trained PRM's habits one by one), and the PRM quality measures that say what a tree
search needs of a PRM (ets/demo/metrics.py; docs/demo.md)."""

import math
import random

import pytest

from ets.demo import ANSWER_PREFIX, check_steps, generate_problem, parse_question, reference_solution


def problems(n, seed=0):
    rng = random.Random(seed)
    return [generate_problem(rng) for _ in range(n)]


def test_verifier_scores_shape_and_values():
    from ets.rewards.base import RewardError, validate_scores
    from ets.rewards.verifier import Verifier

    ps = problems(3, 12)
    rng = random.Random(0)
    good = [reference_solution(p, rng) for p in ps]
    trajs = [[good[0], good[0][:2]], [good[1][:-1] + [f"{ANSWER_PREFIX}0"]], []]
    v = Verifier()
    scores = v([p.question for p in ps], trajs)
    assert validate_scores(scores, trajs, "verifier") == scores
    assert scores[0] == [[1.0] * len(good[0]), [1.0, 1.0]]
    assert scores[1] == [[1.0] * (len(good[1]) - 1) + [0.0]]
    assert scores[2] == []
    with pytest.raises(RewardError):
        v(["What is 2 + 2?"], [[["4"]]])


def test_verifier_blurred_to_an_auc_scores_right_steps_above_wrong_ones_that_often():
    """`auc`: the oracle as a PRM of a chosen step-level ROC AUC, a function of the prefix."""
    from scipy.stats import mannwhitneyu

    from ets.demo.spoil import spoil
    from ets.rewards.base import RewardError
    from ets.rewards.verifier import Verifier

    rng = random.Random(1)
    questions, trajs = [], []
    for p in problems(150, 21):
        ref = reference_solution(p, rng)
        k = rng.randrange(len(ref) - 1)
        # the reference, and a twin that goes wrong at step k and then carries on as written
        trajs.append([ref, ref[:k] + [spoil(p, ref[k], rng, ref[:k])] + ref[k + 1:]])
        questions.append(p.question)
    labels = [ok for p, pair in zip(problems(150, 21), trajs) for steps in pair for ok in check_steps(p, steps)]
    assert labels.count(False) > 400   # wrong steps enough to measure on
    for auc in (0.75, 0.92):
        scores = Verifier(auc=auc)(questions, trajs)
        flat = [s for pair in scores for steps in pair for s in steps]
        right = [s for s, ok in zip(flat, labels) if ok]
        wrong = [s for s, ok in zip(flat, labels) if not ok]
        measured = mannwhitneyu(right, wrong).statistic / (len(right) * len(wrong))
        assert abs(measured - auc) < 0.03, (auc, measured)
        assert all(0.0 < s < 1.0 for s in flat)
        # a prefix's score depends on the prefix alone: the twins agree up to where they part
        for (ref, twin), (a, b) in zip(trajs, scores):
            k = next(i for i, (x, y) in enumerate(zip(ref, twin)) if x != y)
            assert a[:k] == b[:k] and a[k] != b[k]
    # the same steps scored alone, in another batch, score the same; another noise seed, otherwise
    v = Verifier(auc=0.92)
    assert v(questions[3:4], trajs[3:4]) == v(questions, trajs)[3:4]
    assert Verifier(auc=0.92, noise_seed=1)(questions[:1], trajs[:1]) != v(questions[:1], trajs[:1])
    for bad in (0.5, 1.0, 1.3):
        with pytest.raises(RewardError, match="auc"):
            Verifier(auc=bad)


def carried_twins(n: int, seed: int, rng: random.Random, k_below):
    """`n` problems' (questions, [spoiled twin, reference] per problem, labels per trajectory):
    the twin goes wrong at a step k < k_below(reference) and carries the mistake on."""
    from ets.demo.spoil import carry_forward, spoil

    questions, trajs, labels = [], [], []
    for p in problems(n, seed):
        ref = reference_solution(p, rng)
        k = rng.randrange(k_below(ref))
        twin = carry_forward(ref, k, spoil(p, ref[k], rng, ref[:k]))
        questions.append(p.question)
        trajs.append([twin, ref])
        labels += [check_steps(p, twin), check_steps(p, ref)]
    return questions, trajs, labels


def test_verifier_with_persistence_carries_its_mistakes_along_a_path_at_the_same_auc():
    """`persistence`: the step noise follows an AR(1) along the path, so the dial can model a
    trained PRM whose misses persist (miss persistence ~0.65 at rho 0.8, 0 at rho 0) while
    its step AUC and its prefix-determinism stay as they were; rho 0 is the plain dial."""
    from ets.demo.metrics import miss_persistence, roc_auc
    from ets.rewards.base import RewardError
    from ets.rewards.verifier import Verifier

    questions, trajs, labels = carried_twins(200, 23, random.Random(4), lambda ref: len(ref) // 2)
    flat_labels = [ok for labs in labels for ok in labs]
    measured = {}
    for rho in (0.0, 0.8):
        scores = Verifier(auc=0.92, persistence=rho)(questions, trajs)
        per_traj = [t for pair in scores for t in pair]
        measured[rho] = miss_persistence(labels, per_traj)
        assert abs(roc_auc(flat_labels, [s for t in per_traj for s in t]) - 0.92) < 0.03
        for (twin, ref), (a, b) in zip(trajs, scores):      # a prefix's score depends on the prefix alone
            k = next(i for i, (x, y) in enumerate(zip(twin, ref)) if x != y)
            assert a[:k] == b[:k]
    assert abs(measured[0.0]) < 0.15 and measured[0.8] > 0.5, measured
    assert Verifier(auc=0.92, persistence=0.0)(questions, trajs) == Verifier(auc=0.92)(questions, trajs)
    for bad in (-0.1, 1.0):
        with pytest.raises(RewardError, match="persistence"):
            Verifier(auc=0.9, persistence=bad)
    with pytest.raises(RewardError, match="needs auc"):
        Verifier(persistence=0.5)


def test_verifier_kind_bias_shifts_every_step_of_a_kind_alike_and_no_other():
    """`kind_bias`: a step of a listed kind gets its shift added (right or wrong alike), as
    the trained PRM scores products higher than last operations; other kinds are unchanged,
    and so is the ranking within a kind."""
    from statistics import NormalDist

    from ets.rewards.base import RewardError
    from ets.rewards.verifier import Verifier, step_kind

    rng = random.Random(5)
    ps = problems(20, 24)
    questions = [p.question for p in ps]
    trajs = [[reference_solution(p, rng)] for p in ps]
    plain = Verifier(auc=0.7)(questions, trajs)
    biased = Verifier(auc=0.7, kind_bias={"product": 1.5, "sum": -0.5})(questions, trajs)
    probit = NormalDist().inv_cdf
    kinds = set()
    for (steps,), (a,), (b,) in zip(trajs, plain, biased):
        for step, x, y in zip(steps, a, b):
            kind = step_kind(step)
            kinds.add(kind)
            shift = {"product": 1.5, "sum": -0.5}.get(kind, 0.0)
            assert probit(y) - probit(x) == pytest.approx(shift, abs=1e-6), (kind, x, y)
    assert {"product", "sum", "answer"} <= kinds
    with pytest.raises(RewardError, match="unknown step kinds"):
        Verifier(auc=0.7, kind_bias={"products": 1.0})
    with pytest.raises(RewardError, match="needs auc"):
        Verifier(kind_bias={"product": 1.0})
    with pytest.raises(RewardError, match="must be a mapping"):
        Verifier(auc=0.7, kind_bias=[1])
    with pytest.raises(RewardError, match="to numbers"):
        Verifier(auc=0.7, kind_bias={"product": "high"})


def test_verifier_kind_auc_tells_a_kinds_right_and_wrong_steps_apart_at_its_own_auc():
    """`kind_auc`: products at 0.95, every other kind at `auc` (0.65), measured on
    reference solutions and their spoiled twins."""
    from ets.demo.metrics import roc_auc
    from ets.rewards.base import RewardError
    from ets.rewards.verifier import Verifier, step_kind

    questions, trajs, labels = carried_twins(300, 25, random.Random(6), lambda ref: len(ref) - 1)
    scores = [t for pair in Verifier(auc=0.65, kind_auc={"product": 0.95})(questions, trajs) for t in pair]
    steps = [st for pair in trajs for t in pair for st in t]
    flat = list(zip(steps, [ok for labs in labels for ok in labs], [x for t in scores for x in t]))
    for products, target in ((True, 0.95), (False, 0.65)):
        part = [(ok, x) for st, ok, x in flat if (step_kind(st) == "product") == products]
        assert abs(roc_auc([ok for ok, _ in part], [x for _, x in part]) - target) < 0.04, (products, target)
    with pytest.raises(RewardError, match="kind_auc"):
        Verifier(auc=0.7, kind_auc={"answer": 0.4})


def test_verifier_error_auc_is_blind_to_one_error_at_its_own_auc():
    """`error_auc: {operand: 0.7}`: right steps outscore the checker's operand errors at
    0.7 and its other errors at `auc` (0.95), on reference solutions and their spoiled
    twins; unknown errors are refused."""
    from ets.demo.checker import judge_steps
    from ets.demo.metrics import roc_auc
    from ets.rewards.base import RewardError
    from ets.rewards.verifier import Verifier

    questions, trajs, _ = carried_twins(400, 29, random.Random(10), lambda ref: len(ref) - 1)
    scores = [t for pair in Verifier(auc=0.95, error_auc={"operand": 0.7})(questions, trajs) for t in pair]
    verdicts = [v for q, pair in zip(questions, trajs) for t in pair
                for v in judge_steps(parse_question(q), t)]
    flat = list(zip(verdicts, [x for t in scores for x in t]))
    right = [x for v, x in flat if v == "ok"]
    for error, target in (("operand", 0.7), ("inherited", 0.95)):
        wrong = [x for v, x in flat if v == error]
        assert len(wrong) > 50, error
        auc = roc_auc([True] * len(right) + [False] * len(wrong), right + wrong)
        assert abs(auc - target) < 0.04, (error, auc)
    with pytest.raises(RewardError, match="error_auc"):
        Verifier(auc=0.7, error_auc={"product": 0.7})


def test_verifier_trust_accepted_values_scores_what_builds_on_an_accepted_mistake_as_right():
    """`trust_accepted_values`: after a spoiled step the dial scored above 0.5, the first
    step built on its value scores like a right step (mean probit +d/2); after one it
    rejected, like a wrong one (-d/2). Without the option both sit at -d/2."""
    from statistics import NormalDist
    from ets.demo.checker import judge_steps
    from ets.rewards.base import RewardError
    from ets.rewards.verifier import Verifier

    probit = NormalDist().inv_cdf
    half = math.sqrt(2) * probit(0.8) / 2
    questions, trajs, _ = carried_twins(300, 30, random.Random(11), lambda ref: len(ref) - 3)
    for trust in (True, False):
        after = {True: [], False: []}            # was the first wrong step accepted -> probits of inherited steps
        for q, pair in zip(questions, trajs):
            twin = pair[0]
            verdicts = judge_steps(parse_question(q), twin)
            scores = Verifier(auc=0.8, trust_accepted_values=trust)([q], [[twin]])[0][0]
            k = next(i for i, v in enumerate(verdicts) if v != "ok")
            # the first step built on it: the only wrong value it can use is the spoiled step's
            first = next((i for i in range(k + 1, len(twin)) if verdicts[i] == "inherited"), None)
            if first is not None:
                after[scores[k] > 0.5].append(probit(scores[first]))
        assert min(map(len, after.values())) > 40, {key: len(v) for key, v in after.items()}
        mean_accepted, mean_rejected = (sum(v) / len(v) for v in (after[True], after[False]))
        assert abs(mean_rejected + half) < 0.15, mean_rejected
        assert abs(mean_accepted - (half if trust else -half)) < 0.15, (trust, mean_accepted)
    with pytest.raises(RewardError, match="trust_accepted_values"):
        Verifier(trust_accepted_values=True)


def test_verifier_computation_share_1_scores_a_computation_alike_in_every_path_and_wording():
    """`computation_share: 1`: two reference solutions of one problem (other orders, other
    wordings) score every computation they share the same; keyed by prefix they do not.
    The step AUC is still the one asked for."""
    from ets.demo.metrics import roc_auc
    from ets.demo.spoil import carry_forward, spoil
    from ets.rewards.base import RewardError
    from ets.demo.checker import computation
    from ets.rewards.verifier import Verifier

    rng = random.Random(7)
    shared = differ = 0
    questions, trajs, labels = [], [], []
    for p in problems(150, 26):
        one, two = reference_solution(p, rng), reference_solution(p, rng)
        k = rng.randrange(len(one) - 1)
        twin = carry_forward(one, k, spoil(p, one[k], rng, one[:k]))
        questions.append(p.question)
        trajs.append([one, two, twin])
        labels += [check_steps(p, t) for t in (one, two, twin)]
        by_comp = Verifier(auc=0.7, computation_share=1)([p.question], [[one, two]])[0]
        by_prefix = Verifier(auc=0.7)([p.question], [[one, two]])[0]
        first = {computation(st): (x, y) for st, x, y in zip(one, by_comp[0], by_prefix[0])}
        for st, x, y in zip(two, by_comp[1], by_prefix[1]):
            if computation(st) in first and st not in one:        # the same computation, other words
                shared += 1
                assert x == first[computation(st)][0]
                differ += y != first[computation(st)][1]
    assert shared > 100 and differ > 0.9 * shared
    for share in (1.0, 0.5):
        scores = [t for per_p in Verifier(auc=0.8, computation_share=share)(questions, trajs) for t in per_p]
        auc = roc_auc([ok for labs in labels for ok in labs], [x for t in scores for x in t])
        assert abs(auc - 0.8) < 0.05, (share, auc)
    for bad in (1.5, -0.1, "half"):
        with pytest.raises(RewardError, match="computation_share"):
            Verifier(auc=0.7, computation_share=bad)
    with pytest.raises(RewardError, match="needs auc"):
        Verifier(computation_share=0.5)


def test_computation_consistency_tells_one_verdict_per_computation_from_one_per_path():
    """The verifier keyed by computation repeats its verdict: 1; keyed by prefix it draws
    afresh for each path: ~0; keyed 3/4 by computation: ~0.75, the share the dial sets;
    too few groups: NaN."""
    from ets.demo.metrics import computation_consistency
    from ets.demo.spoil import spoil
    from ets.rewards.verifier import Verifier

    rng = random.Random(8)
    questions, trajs, labels = [], [], []
    for p in problems(120, 27):
        ref = reference_solution(p, rng)
        k = rng.randrange(len(ref) - 1)
        bad = spoil(p, ref[k], rng, ref[:k])
        # the same wrong step after three different prefixes (the steps before it, reversed, one fewer)
        prefixes = [ref[:k], ref[:k][::-1], ref[:k][1:]]
        questions.append(p.question)
        trajs.append([pre + [bad] for pre in prefixes])
        labels.append([check_steps(p, t) for t in trajs[-1]])
    for share, low, high in ((1.0, 0.99, 1.0), (0.0, -0.2, 0.2), (0.75, 0.6, 0.9)):
        value = computation_consistency(trajs, labels, Verifier(auc=0.7, computation_share=share)(questions, trajs))
        assert low <= value <= high, (share, value)
    one_group = [[["Sum: 1 + 1 = 3"], ["Ones: 1 * 1 = 1", "Sum: 1 + 1 = 3"]]]      # one wrong computation, 2 prefixes
    assert math.isnan(computation_consistency(one_group, [[[False], [True, False]]], [[[0.3], [0.9, 0.4]]]))


def test_computation_auc_counts_each_computation_once_however_many_paths_make_it():
    """A wrong computation met in ten paths and scored low, another met in one path and
    overrated: the step AUC (~0.91) hides the overrated one, the computation AUC (0.5)
    does not. The keyed dial's computation AUC is the AUC it was set to."""
    from ets.demo.metrics import computation_auc, roc_auc
    from ets.demo.spoil import spoil
    from ets.rewards.verifier import Verifier

    trajs = [[f"Part {i}: 2 * 3 = 6\n", "Sum: 6 + 1 = 8\n"] for i in range(10)] + [["Part: 2 * 4 = 9\n"]]
    labels = [[True, False]] * 10 + [[False]]
    scores = [[0.9, 0.1]] * 10 + [[0.95]]
    steps_auc = roc_auc([ok for labs in labels for ok in labs], [x for sc in scores for x in sc])
    assert abs(steps_auc - 10 / 11) < 1e-9
    assert computation_auc([trajs], [labels], [scores]) == (0.5, 1)
    assert computation_auc([trajs[:10]], [labels[:10]], [[[0.9, 0.1]] * 10]) == (1.0, 1)

    rng = random.Random(9)
    questions, batch, labs = [], [], []
    for p in problems(60, 28):
        paths = []
        for _ in range(6):
            ref = reference_solution(p, rng)
            k = rng.randrange(len(ref) - 1)
            paths += [ref, ref[:k] + [spoil(p, ref[k], rng, ref[:k])]]
        questions.append(p.question)
        batch.append(paths)
        labs.append([check_steps(p, t) for t in paths])
    value, count = computation_auc(batch, labs, Verifier(auc=0.8, computation_share=1)(questions, batch))
    assert count == 60 and abs(value - 0.8) < 0.05, value


def test_rebase_steering_weighs_paths_as_rebase_does_not_by_rank():
    """Two PRMs that rank every path alike (AUC 1) steer REBASE's softmax (T 0.2) very
    differently: scores 0.9 / 0.1 put nearly all the weight on the right paths, scores
    0.51 / 0.49 barely more than their plain share. Groups are per depth, paths distinct."""
    from ets.demo.metrics import rebase_steering, roc_auc

    trajs = [[["A: 1 + 1 = 2\n", "B: 2 + 2 = 4\n"], ["A: 1 + 1 = 3\n", "B: 3 + 3 = 6\n"],
              ["A: 1 + 2 = 3\n", "B: 3 + 1 = 5\n"]]]
    labels = [[[True, True], [False, False], [True, False]]]
    for high, low, at_least, at_most in ((0.9, 0.1, 0.95, 1.0), (0.51, 0.49, 0.5, 0.56)):
        scores = [[[high if ok else low for ok in labs] for labs in labels[0]]]
        flat = [(ok, x) for labs, sc in zip(labels[0], scores[0]) for ok, x in zip(labs, sc)]
        assert roc_auc([ok for ok, _ in flat], [x for _, x in flat]) == 1.0
        weight, plain, groups = rebase_steering(trajs, labels, scores)
        # depth 0: 2 of 3 right; depth 1: 1 of 3 right
        assert groups == 2 and abs(plain - (2 / 3 + 1 / 3) / 2) < 1e-9
        assert at_least <= weight <= at_most, (high, low, weight)
    assert rebase_steering([trajs[0][:1]], [labels[0][:1]], [[[0.9, 0.9]]])[2] == 0   # no group with both


def test_miss_persistence_tells_a_prm_whose_misses_carry_on_from_one_that_judges_each_step_afresh():
    """The verifier blurred to an AUC judges each step afresh: ~0. A PRM that scores the
    steps after a wrong one as it scored that one (here: the same score plus a little
    noise) persists: ~1. Trajectories without a wrong step, or with nothing after it, do
    not count."""
    from ets.demo.metrics import miss_persistence
    from ets.demo.spoil import spoil
    from ets.rewards.verifier import Verifier

    rng = random.Random(2)
    questions, trajs, labels = [], [], []
    for p in problems(200, 22):
        ref = reference_solution(p, rng)
        k = rng.randrange(len(ref) // 2)
        twin = ref[:k] + [spoil(p, ref[k], rng, ref[:k])] + ref[k + 1:]
        questions.append(p.question)
        trajs.append([twin, ref])
        labels += [check_steps(p, twin), check_steps(p, ref)]
    fresh = [t for per_p in Verifier(auc=0.8)(questions, trajs) for t in per_p]
    assert abs(miss_persistence(labels, fresh)) < 0.15
    noise = random.Random(3)
    carried = []
    for labs, sc in zip(labels, fresh):
        k = next((i for i, ok in enumerate(labs) if not ok), None)
        carried.append(sc if k is None else sc[:k + 1] + [sc[k] + noise.gauss(0, 0.02) for _ in sc[k + 1:]])
    assert miss_persistence(labels, carried) > 0.9
    assert math.isnan(miss_persistence([[True, True], [False]], [[0.9, 0.8], [0.1]]))   # nothing to correlate
