"""A PRM round's batched paths against straightforward per-candidate references computed
here: one batched tokenizer call == one call per text; one gather on the batch tensor ==
the rows read one sequence at a time; the engine scorer's shared-prefix search (bisection
over sorted sequences) == comparing every sequence; and whole scores == a per-candidate
forward of each trajectory alone."""

import hashlib
from types import SimpleNamespace

import pytest
import torch

from ets.models.tiny import STEP_TAG, build_tiny_model
from ets.rewards.backends import EngineBackend, ForwardBackend, _starting_with
from ets.rewards.base import RewardError
from ets.rewards.marking import (MarkedText, MarkerError, mark_steps, tokenize_marked, tokenize_marked_batch,
                             tokenize_pieces, tokenize_pieces_batch)
from ets.rewards.step_tag import StepTagOptions, StepTagPRM
from ets.rewards.value_head import ValueHeadOptions, ValueHeadPRM

QUESTIONS = ["Tom has 3 apples and buys 4 more. How many apples does he have?", "What is {x}^2 if x = 3?",
             "Ivy buys 7 towels at 30 dollars each and 6 socks at 49 dollars each. How much?"]
HISTORY = [["3 + 4 = 7\n", "The answer is 7.\n"], ["x^2 = 9\n"], ["7 towels at 30 dollars: 7 * 30 = 210\n"]]
NEW = ["So 8.\n", "He has 7 apples.\n", "= 9\n", "6 socks at 49 dollars: 6 * 49 = 294\n", "Total: 504\n",
       "The answer is: 504\n", "7 * 30 = 210\n"]


def round_of_candidates(n_per_question: int = 7):
    """Siblings that share their question's history and differ in the newest step; one
    duplicate, one empty trajectory and one trajectory without history."""
    trajs = []
    for q, history in enumerate(HISTORY):
        per_q = [history + [NEW[(q + k) % len(NEW)]] for k in range(n_per_question)]
        per_q.append(list(per_q[0]))           # a duplicate candidate
        per_q.append([])                       # nothing to score
        per_q.append([NEW[q]])                 # no history
        trajs.append(per_q)
    return QUESTIONS, trajs


@pytest.fixture(scope="module")
def llama():
    model, tok = build_tiny_model("llama", seed=2)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)        # spread the scores out
    return model, tok


def marked_texts(tok_prm):
    qs, trajs = round_of_candidates()
    return [tok_prm.render(q, steps) for q, per_q in zip(qs, trajs) for steps in per_q]


# ------------------------------------------------------------------ tokenisation

@pytest.mark.parametrize("special", [True, False])
def test_one_batched_tokenizer_call_equals_one_call_per_text(llama, special):
    model, tok = llama
    prm = StepTagPRM.from_model(model, tok)
    marked = marked_texts(prm)
    # Markers merged into their neighbour and found by searching the span, too.
    marked.append(mark_steps("Q? ", ["aки", "b"], STEP_TAG, "\n"))
    expected = [tokenize_marked(tok, m, prm.marker_id, special) for m in marked]
    assert tokenize_marked_batch(tok, marked, prm.marker_id, special) == expected
    assert tokenize_marked_batch(tok, [], prm.marker_id, special) == []


def test_a_marker_error_in_a_batch_names_its_text(llama):
    model, tok = llama
    good = mark_steps("Q? ", ["a"], STEP_TAG, "\n")
    bad = MarkedText("Q? a b", [(3, 4)])        # "a" is not the marker's token
    with pytest.raises(MarkerError) as exc:
        tokenize_marked_batch(tok, [good, good, bad], tok.convert_tokens_to_ids(STEP_TAG), True)
    assert exc.value.index == 2


@pytest.mark.parametrize("special", [True, False])
def test_batched_pieces_equal_pieces_encoded_one_text_at_a_time(llama, special):
    _, tok = llama
    newline = tok.encode("\n", add_special_tokens=False)[-1]
    qs, trajs = round_of_candidates()
    marked = [mark_steps(q + "\n", steps, "\n", "") for q, per_q in zip(qs, trajs) for steps in per_q]
    expected = [tokenize_pieces(tok, m, newline, special) for m in marked]
    assert tokenize_pieces_batch(tok, marked, newline, special) == expected


def test_encode_batch_equals_encode_of_each_candidate(llama):
    model, tok = llama
    prm = StepTagPRM.from_model(model, tok)
    qs, trajs = round_of_candidates()
    items = [(q, steps) for q, per_q in zip(qs, trajs) for steps in per_q if steps]
    reference = [tokenize_marked(tok, prm.render(q, list(s)), prm.marker_id, True) for q, s in items]
    assert prm.encode_batch(items) == reference
    assert [prm.encode(q, s) for q, s in items] == reference


def test_an_unfound_marker_names_the_question_and_trajectory(llama):
    model, tok = llama

    class Broken(StepTagPRM):
        def render(self, question, steps):
            marked = super().render(question, steps)
            if "8" in steps[-1]:
                return MarkedText(marked.text, [(0, 1)] * len(marked.spans))
            return marked

    prm = Broken(tok, StepTagOptions(), lambda cols: ForwardBackend.for_tokenizer(model, tok, cols))
    qs, trajs = round_of_candidates()
    with pytest.raises(RewardError, match="question 0 trajectory 0"):
        prm(qs, trajs)


def test_a_subclass_that_changes_only_encode_keeps_its_encode(llama):
    model, tok = llama
    calls = []

    class PerCandidate(StepTagPRM):
        def encode(self, question, steps):
            calls.append(len(steps))
            return super().encode(question, steps)

    prm = PerCandidate(tok, StepTagOptions(), lambda cols: ForwardBackend.for_tokenizer(model, tok, cols))
    qs, trajs = round_of_candidates()
    assert flat(prm(qs, trajs)) == flat(StepTagPRM.from_model(model, tok)(qs, trajs))
    assert len(calls) == sum(1 for per_q in trajs for t in per_q if t)


# ------------------------------------------------------------- gathering the rows

class PositionalLM(torch.nn.Module):
    """A stand-in LM whose logits are an exact function of (token, position id, column), so
    the rows any backend returns can be checked bit for bit against the unpadded input."""

    def __init__(self, vocab: int = 50, keep_arg: bool = True):
        super().__init__()
        self.vocab = vocab
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        if not keep_arg:
            self.forward = self._forward_all

    @staticmethod
    def value(token, position, column):
        return token * 1000.0 + position * 10.0 + column * 0.01

    def _logits(self, input_ids, position_ids):
        cols = torch.arange(self.vocab, dtype=torch.float32)
        return self.value(input_ids[..., None].float(), position_ids[..., None].float(), cols)

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=None):
        logits = self._logits(input_ids, position_ids)
        if isinstance(logits_to_keep, torch.Tensor):
            logits = logits[:, logits_to_keep]
        return SimpleNamespace(logits=logits)

    def _forward_all(self, input_ids=None, attention_mask=None, position_ids=None, use_cache=False):
        return SimpleNamespace(logits=self._logits(input_ids, position_ids))


def ragged_batch():
    g = torch.Generator().manual_seed(0)
    sequences, positions = [], []
    for n in (5, 17, 3, 17, 9, 1, 12):
        seq = torch.randint(1, 40, (n,), generator=g).tolist()
        k = int(torch.randint(1, n + 1, (1,), generator=g))
        pos = sorted(torch.randperm(n, generator=g)[:k].tolist())
        if n > 3:
            pos = pos + [pos[0]]              # a position asked for twice, out of order
        sequences.append(seq)
        positions.append(pos)
    return sequences, positions


@pytest.mark.parametrize("keep_arg", [True, False])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("max_batch_tokens", [8192, 30, None], ids=["8192", "30", "invariant"])
def test_forward_backend_rows_are_each_sequences_own_rows(keep_arg, side, max_batch_tokens):
    """Padded micro-batches (of max_batch_tokens), or one sequence per forward (None:
    batch_invariant): the same rows."""
    model = PositionalLM(keep_arg=keep_arg)
    columns = [7, 3, 0]
    invariant = max_batch_tokens is None
    backend = ForwardBackend(model, columns, pad_id=0, padding_side=side, max_batch_tokens=max_batch_tokens or 8192,
                             batch_invariant=invariant)
    sequences, positions = ragged_batch()
    out = backend.logits_at(sequences, positions)
    for seq, pos, rows in zip(sequences, positions, out):
        expected = torch.tensor([[PositionalLM.value(seq[p], p, c) for c in columns] for p in pos])
        assert rows.shape == (len(pos), len(columns))
        assert torch.equal(rows, expected)
    stats = backend.stats()
    assert stats["computed_tokens"] == sum(map(len, sequences))
    assert stats["forward_calls"] == (len(sequences) if invariant else 1 if max_batch_tokens == 8192 else 4)
    assert (stats["padded_tokens"] == 0) == invariant


class DigestEngine:
    """A stand-in engine whose row at position p is an exact function of tokens[:p+1]; it
    records what it was asked to compute."""

    def __init__(self, vocab: int = 6):
        self.vocab = vocab
        self.calls = []
        self.computed = 0

    @staticmethod
    def row(prefix, vocab):
        digest = hashlib.sha256(str(list(prefix)).encode()).digest()
        return torch.tensor([digest[i] / 7.0 for i in range(vocab)])

    def score(self, sequences, positions, hidden_states=False):
        self.calls.append(([list(s) for s in sequences], [list(p) for p in positions]))
        self.computed += sum(map(len, sequences))
        return [torch.stack([self.row(s[: p + 1], self.vocab) for p in pos]) for s, pos in zip(sequences, positions)]

    def stats(self):
        return {"computed_tokens": self.computed, "cache_hit_tokens": 0, "pool_kv_tokens": 0, "peak_kv_tokens": 0}


def tree_round():
    """Two rounds of a search tree in tokens: a shared question, histories, siblings."""
    q1, q2 = list(range(100, 112)), list(range(200, 209))
    h = [q1 + [1, 2, 3, 9], q1 + [4, 5, 9], q2 + [6, 6, 6, 6, 9]]
    round1 = [(s, [len(s) - 1]) for s in h]
    round2 = []
    for k, s in enumerate(h):
        for j in range(4):
            child = s + [10 + j, 20 + k, 30 + j, 9]
            round2.append((child, [len(s) - 1, len(child) - 1]))
    round2.append((q1 + [1, 2, 3, 9] + [10, 20, 30, 9], [15, 19]))    # a duplicate
    return round1, round2


@pytest.mark.parametrize("memo", [True, False])
def test_engine_backend_rows_are_each_prefixs_own_rows(memo):
    engine = DigestEngine()
    columns = [4, 1]
    backend = EngineBackend(engine, columns, min_shared_tokens=4, **({} if memo else {"max_cached_rows": 0}))
    for rnd in tree_round():
        sequences, positions = [s for s, _ in rnd], [p for _, p in rnd]
        out = backend.logits_at(sequences, positions)
        for seq, pos, rows in zip(sequences, positions, out):
            expected = torch.stack([DigestEngine.row(seq[: p + 1], engine.vocab)[columns] for p in pos])
            assert torch.equal(rows, expected)
    # Shared prefixes were scored before the sequences that share them.
    assert len(engine.calls) > 2


def test_the_sequences_sharing_a_prefix_are_those_that_start_with_it():
    """Two bisections over the sorted sequences == comparing the prefix with every one."""
    g = torch.Generator().manual_seed(1)
    sequences = [torch.randint(0, 3, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist()
                 for _ in range(200)]
    sequences += [[], [2**40], [0, 0]]
    ordered = sorted(sequences)
    prefixes = [[], [0], [1, 2], [0, 0], [2, 2, 2], [2**40], [3], [0, 1, 2, 0, 1, 2, 0]] + sequences[:50]
    for prefix in prefixes:
        found = [ordered[j] for j in _starting_with(ordered, prefix)]
        assert found == [s for s in ordered if s[: len(prefix)] == prefix], prefix


@pytest.mark.parametrize("memo", [True, False])
def test_the_engine_backend_scores_a_shared_prefix_apart_only_for_rows_inside_it(memo):
    """The engine calls of two rounds. A shared prefix gets a call of its own (first, level
    by level) only when a row is wanted inside it: then its sharers need not compute it
    each. Shared prefixes without one (the question; a history whose tag was scored in
    round 1, when rows are memoised) are left to the engine, which computes them once
    within the call (Engine.score); a call of their own would only cost a forward."""
    engine = DigestEngine()
    backend = EngineBackend(engine, [0, 1], min_shared_tokens=4, **({} if memo else {"max_cached_rows": 0}))
    for rnd in tree_round():
        backend.logits_at([s for s, _ in rnd], [p for _, p in rnd])
    lengths = [[len(s) for s in seqs] for seqs, _ in engine.calls]
    positions = [poss for _, poss in engine.calls]
    last = [[20, 20, 20, 19, 19, 19, 19, 18, 18, 18, 18], [[19], [19], [19], [18], [18], [18], [18], [17], [17], [17], [17]]]
    if memo:  # round 1; round 2: the child that is there twice, then each child's newest row
        assert lengths == [[16, 15, 14], [20], last[0]]
        assert positions == [[[15], [14], [13]], [[19]], last[1]]
    else:  # round 2 also wants the histories' rows again: each history once, before its children
        assert lengths == [[16, 15, 14], [14], [16, 15], [20], last[0]]
        assert positions == [[[15], [14], [13]], [[13]], [[15], [14]], [[19]], last[1]]


# ------------------------------------------------------------------ whole scores

def flat(scores):
    return [v for per_q in scores for per_t in per_q for v in per_t]


def each_alone(model, tok, prm, questions, trajectories, tokenize, readout):
    """Each trajectory alone: tokenised on its own (`tokenize`), one unpadded forward, and
    `readout(logits at its marked positions)` -> its scores."""
    out = []
    for question, per_q in zip(questions, trajectories):
        per = []
        for steps in per_q:
            if not steps:
                per.append([])
                continue
            ids, pos = tokenize(tok, prm.render(question, list(steps)), prm.marker_id, True)
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0]
            per.append(readout(logits[pos]).tolist())
        out.append(per)
    return out


def per_candidate_reference(model, tok, prm, questions, trajectories):
    """Step-tag scores of each trajectory alone: softmax over (good, bad) at each tag."""
    good, bad = prm.backend.columns.tolist()
    return each_alone(model, tok, prm, questions, trajectories, tokenize_marked,
                      lambda at: torch.softmax(at[:, [good, bad]].float(), -1)[:, 0])


@pytest.mark.parametrize("options", [StepTagOptions(), StepTagOptions(batch_invariant=False),
                                     StepTagOptions(batch_invariant=False, padding_side="left"),
                                     StepTagOptions(batch_invariant=False, max_batch_tokens=64)])
def test_step_tag_round_equals_each_candidate_scored_alone(llama, options):
    model, tok = llama
    qs, trajs = round_of_candidates()
    prm = StepTagPRM.from_model(model, tok, options)
    reference = per_candidate_reference(model, tok, prm, qs, trajs)
    scores = prm(qs, trajs)
    assert [[len(t) for t in q] for q in scores] == [[len(t) for t in q] for q in trajs]
    assert flat(scores) == pytest.approx(flat(reference), abs=1e-6)
    assert max(flat(scores)) - min(flat(scores)) > 0.05


def test_step_tag_round_on_the_engine_equals_each_candidate_scored_alone(llama):
    from ets.engine import Engine

    model, tok = llama
    engine = Engine.from_pretrained(model, kv_budget_tokens=8192, device="cpu", dtype="float32", tokenizer=tok)
    prm = StepTagPRM.from_model(model, tok, engine=engine)
    qs, trajs = round_of_candidates()
    history = [[h] for h in HISTORY]
    prm(qs, history)                          # the previous round: histories are memoised
    reference = per_candidate_reference(model, tok, prm, qs, trajs)
    assert flat(prm(qs, trajs)) == pytest.approx(flat(reference), abs=1e-6)
    engine.check()


def test_value_head_pieces_round_equals_each_candidate_alone(llama):
    model, tok = llama
    options = ValueHeadOptions(head="lm_logit", tokenize="pieces")
    newline = tok.encode("\n", add_special_tokens=False)[-1]
    prm = ValueHeadPRM(model, tok, options, [newline])
    qs, trajs = round_of_candidates()
    expected = each_alone(model, tok, prm, qs, trajs, tokenize_pieces, lambda at: torch.sigmoid(at[:, newline]))
    assert flat(prm(qs, trajs)) == pytest.approx(flat(expected), abs=1e-6)
