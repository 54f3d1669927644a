"""Sampling is seeded per sequence and stops where it should."""

import pytest

from ets.engine import Engine
from ets.models.tiny import build_tiny_model
from tests.helpers import random_tokens


@pytest.fixture(scope="module")
def model_tok():
    return build_tiny_model("qwen2", seed=3)



@pytest.mark.parametrize("params", [dict(temperature=1.0), dict(temperature=0.7, top_k=20, top_p=0.9)])
def test_seeded_sampling_is_reproducible(model_tok, params):
    model, tok = model_tok
    requests = [(random_tokens(15, seed=1), 3), (random_tokens(9, seed=2), 2)]
    first = Engine(model, tok, kv_budget_tokens=1024).expand(requests, max_new_tokens=6, seed=7, **params)
    engine = Engine(model, tok, kv_budget_tokens=200, max_batch_tokens=8)  # other batching, a cache
    engine.generate([requests[0][0]], max_new_tokens=3, seed=1)
    again = engine.expand(requests, max_new_tokens=6, seed=7, **params)
    engine.check()
    assert [[c.token_ids for c in r] for r in again] == [[c.token_ids for c in r] for r in first]
    other = engine.expand(requests, max_new_tokens=6, seed=8, **params)
    assert [[c.token_ids for c in r] for r in other] != [[c.token_ids for c in r] for r in first]
    samples = [c.token_ids for c in first[0]]
    assert len({tuple(s) for s in samples}) > 1  # siblings differ


def _splitmix_reference(x: int) -> int:
    """SplitMix64 in Python integers (mod 2^64): what sampling._splitmix must compute."""
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def test_uniforms_are_splitmix64_streams_read_at_their_position():
    """The int64 tensor arithmetic (wrapping products, logical shifts) equals SplitMix64 on
    Python integers, for seeds across the whole signed range."""
    import torch

    from ets.engine.sampling import uniforms

    seeds = [0, 1, 2, 7, 2**31 - 1, 2**62 + 5, 2**63 - 1, 123456789 * 1_000_003]
    positions = [0, 1, 5, 100, 1023, 2**20, 3, 999_999]
    got = uniforms(torch.tensor(seeds), torch.tensor(positions)).tolist()
    m = (1 << 64) - 1
    for s, t, u in zip(seeds, positions, got):
        state = _splitmix_reference(s)
        want = (_splitmix_reference((state + t * 0x9E3779B97F4A7C15) & m) >> 11) * 2.0 ** -53
        assert u == want


def test_batched_sampling_draws_each_row_from_its_own_stream_and_the_right_distribution():
    """A row's token depends on its logits, seed and position only (not on the other rows
    or their order), and over many seeds the draws follow the filtered softmax."""
    import torch

    from ets.engine.sampling import SamplingParams, sample

    logits = torch.randn(9, 300, generator=torch.Generator().manual_seed(0)) * 3
    seeds, positions = [100 + b for b in range(9)], [40 + 3 * b for b in range(9)]
    for params in (SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_k=20, top_p=0.9)):
        got = sample(logits, params, seeds, positions)
        order = [4, 0, 8, 2, 6, 1, 7, 3, 5]
        shuffled = sample(logits[order], params, [seeds[b] for b in order], [positions[b] for b in order])
        assert [got[b] for b in order] == shuffled
        alone = [sample(logits[b:b + 1], params, [seeds[b]], [positions[b]])[0] for b in range(9)]
        assert alone == got
        assert sample(logits, params, seeds, [t + 1 for t in positions]) != got  # the next position differs

    # Distribution: one row, 20,000 streams (consecutive seeds); the filtered-out tokens are never drawn and
    # the frequencies of the kept ones match their probabilities (chi-square, 0.1% level).
    row = torch.tensor([[2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0, -8.0]])
    params = SamplingParams(temperature=0.8, top_k=6, top_p=0.95)
    n = 20_000
    drawn = torch.tensor(sample(row.expand(n, -1), params, list(range(n)), [7] * n))
    scaled = row[0] / params.temperature
    kept = scaled.masked_fill(scaled < torch.topk(scaled, params.top_k).values[-1], float("-inf"))
    p = kept.softmax(-1)
    beyond = p.cumsum(-1) - p > params.top_p  # already sorted descending
    p = kept.masked_fill(beyond, float("-inf")).softmax(-1)
    counts = torch.bincount(drawn, minlength=8).double()
    assert counts[p == 0].sum() == 0
    expected = n * p[p > 0].double()
    chi2 = ((counts[p > 0] - expected) ** 2 / expected).sum().item()
    assert (p > 0).sum() == 4  # top-k dropped two tokens, top-p two more
    assert chi2 < 16.3  # the 0.999 quantile of chi-square with 3 degrees of freedom


def test_rows_under_different_settings_are_sampled_as_each_alone():
    """sample_rows groups rows by their settings: every row's token is the one `sample`
    draws for it alone, whether the rows share one settings object or not."""
    import torch

    from ets.engine.sampling import SamplingParams, sample, sample_rows

    logits = torch.randn(7, 50, generator=torch.Generator().manual_seed(3)) * 2
    seeds, positions = [11 * b for b in range(7)], [5 + b for b in range(7)]
    hot, cool, greedy = SamplingParams(temperature=1.0), SamplingParams(temperature=0.5, top_k=5), SamplingParams(temperature=0)
    mixed = [hot, cool, greedy, hot, cool, cool, greedy]
    alone = [sample(logits[b:b + 1], p, [seeds[b]], [positions[b]])[0] for b, p in enumerate(mixed)]
    assert sample_rows(logits, mixed, seeds, positions) == alone
    one = [hot] * 7
    assert sample_rows(logits, one, seeds, positions) == sample(logits, hot, seeds, positions)
    assert sample_rows(logits[:0], [], [], []) == []


def test_stop_strings_and_token_ids(model_tok):
    model, tok = model_tok
    engine = Engine(model, tok, kv_budget_tokens=1024)
    prompt = random_tokens(10, seed=3)
    free = engine.generate([prompt], max_new_tokens=30, temperature=0)[0]
    text_tokens = free[4:6]
    stop_text = tok.decode(text_tokens)
    out = engine.generate([prompt], max_new_tokens=30, temperature=0, stop=[stop_text])[0]
    assert stop_text in tok.decode(out) and len(out) <= 6 and out == free[: len(out)]
    out = engine.generate([prompt], max_new_tokens=30, temperature=0, stop=[free[2]])[0]
    assert out == free[: free.index(free[2]) + 1]
    (conts,) = engine.expand([(prompt, 1)], max_new_tokens=3, temperature=0)
    assert conts[0].finish == "length" and conts[0].token_ids == free[:3]
    engine.check()



def test_a_request_with_its_own_seed_samples_the_same_anywhere(model_tok):
    """Sample j of a request carrying its own seed depends only on (that seed, j): not on
    the other requests, their order, the call's seed, cache hits or preemption."""
    model, tok = model_tok
    prompt = random_tokens(15, seed=1)
    mine = (prompt, 3, 42)
    others = [(random_tokens(12, seed=2), 3), (random_tokens(9, seed=3), 2, 5)]
    kw = dict(max_new_tokens=8, temperature=1.0, ignore_eos=True)

    def tokens(conts):
        return [c.token_ids for c in conts]

    alone = tokens(Engine(model, tok, kv_budget_tokens=1024).expand([mine], **kw)[0])
    assert len({tuple(t) for t in alone}) > 1
    # the call-level rule for a call of one request: the same samples
    assert tokens(Engine(model, tok, kv_budget_tokens=1024).expand([(prompt, 3)], seed=42, **kw)[0]) == alone

    roomy = Engine(model, tok, kv_budget_tokens=1024)
    roomy.generate([prompt[:10]], max_new_tokens=2, seed=0)   # a cache hit for `mine`
    got = roomy.expand([*others, mine], seed=9, **kw)
    assert tokens(got[2]) == alone
    assert tokens(roomy.expand([mine, *reversed(others)], seed=1, **kw)[0]) == alone
    roomy.check()

    tiny = Engine(model, tok, kv_budget_tokens=40, max_batch_tokens=8)
    assert tokens(tiny.expand([others[0], mine, others[1]], seed=3, **kw)[1]) == alone
    tiny.check()
    assert tiny.stats()["preempted"] > 0

    assert tokens(Engine(model, tok, kv_budget_tokens=1024).expand([(prompt, 3, 43)], **kw)[0]) != alone
    # generate takes one seed per prompt the same way
    engine = Engine(model, tok, kv_budget_tokens=1024)
    assert engine.generate([others[0][0], prompt], seeds=[None, 42], seed=7, max_new_tokens=8,
                           ignore_eos=True)[1] == alone[0]
    with pytest.raises(TypeError, match="seed"):
        engine.expand([(prompt, 1, "42")])
    with pytest.raises(ValueError, match="token_ids, n"):
        engine.expand([(prompt,)])


def _sentencepiece_like_tokenizer():
    """A Metaspace BPE tokenizer: its decoder drops a lone token's leading space ("▁the"
    alone decodes to "the"), as SentencePiece vocabularies (Llama, Mistral) do."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Metaspace()
    core.decoder = decoders.Metaspace()
    corpus = ["the cat sat on the mat. ки\n", "a b c d, e f g!\n", "7 * 40 = 280 ки 280 + 6 = 286 ки\n"] * 20
    core.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>"], show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>")


@pytest.mark.parametrize("which", ["tiny", "sentencepiece"])
@pytest.mark.parametrize("strings", [("\n",), (" ",), ("ки",), ("at", "= 2"), ("é",)])
def test_stop_strings_stop_at_the_token_where_they_first_appear(model_tok, which, strings):
    """StopStrings decodes only after tokens that could complete a string (token_flags);
    it must stop exactly where decoding after every token would."""
    import random

    from ets.engine.sampling import StopStrings

    tok = model_tok[1] if which == "tiny" else _sentencepiece_like_tokenizer()
    stop = StopStrings(tok, strings)
    rng = random.Random(0)
    stops = 0
    for _ in range(300):
        tokens = [rng.randrange(len(tok)) for _ in range(30)]
        if rng.random() < 0.5:  # half of them with a string written in, between other text
            text = rng.choice(["the ", "7 * 4", "mat"]) + rng.choice(strings) + rng.choice([" cat", "0 = 2", "\n"])
            written = tok.encode(text, add_special_tokens=False)
            at = rng.randrange(30 - len(written))
            tokens[at:at + len(written)] = written
        expected = next((t for t in range(1, 31) if any(
            s in tok.decode(tokens[:t][-stop.window:], skip_special_tokens=False) for s in strings)), None)
        got = next((t for t in range(1, 31) if stop.found(tokens[:t])), None)
        assert got == expected, (tokens, got, expected)
        stops += expected is not None
    # the rule is exercised (the Metaspace vocabulary has no "é" and no byte fallback)
    assert stops > 50 or (which, strings) == ("sentencepiece", ("é",))
    assert sum(stop.flags) < len(stop.flags) or strings == (" ",)  # and it filters


def test_stop_string_is_looked_for_in_the_output_only(model_tok):
    """A stop string that begins in the prompt and ends in the output does not stop it:
    StopChecker reads `tokens[start:]` (the output), not the prompt before it."""
    from ets.engine.sampling import SamplingParams, StopChecker

    tok = model_tok[1]
    prompt, new = tok.encode("the ca", add_special_tokens=False), tok.encode("t sat", add_special_tokens=False)
    checker = StopChecker(SamplingParams(max_new_tokens=50, stop_strings=("cat",)), set(), tok)
    tokens = prompt + new
    assert all(checker.finish(tokens[:t], len(prompt)) is None for t in range(len(prompt) + 1, len(tokens) + 1))
    cat = tok.encode("a cat", add_special_tokens=False)
    assert checker.finish(prompt + cat, len(prompt)) == "stop"
    short = StopChecker(SamplingParams(max_new_tokens=2), set(), tok)  # counts the output only
    assert [short.finish(tokens[:t], len(prompt)) for t in (len(prompt) + 1, len(prompt) + 2)] == [None, "length"]


@pytest.mark.parametrize("stop", [dict(), dict(stop_token_ids=frozenset({5, 9})), dict(stop_strings=("at", "\n"))])
def test_may_finish_flags_every_row_that_finish_ends(model_tok, stop):
    """A decode run checks stops only on the rows `may_finish` flags (decode_run.py): every
    row that `finish` would end must be among them, and not every other row (on this
    byte-level vocabulary, half the tokens could end "at" or are part of a character)."""
    import random

    import torch

    from ets.engine.sampling import SamplingParams, StopChecker

    tok = model_tok[1]
    checker = StopChecker(SamplingParams(max_new_tokens=12, **stop), {tok.eos_token_id}, tok)
    rng = random.Random(1)
    outputs = [[rng.randrange(len(tok)) for _ in range(rng.randrange(1, 14))] for _ in range(400)]
    prompt = random_tokens(6, seed=4)
    ends = [checker.finish(prompt + out, len(prompt)) is not None for out in outputs]
    flagged = checker.may_finish(torch.tensor([out[-1] for out in outputs]), torch.tensor([len(out) for out in outputs]))
    assert all(f for f, e in zip(flagged.tolist(), ends) if e) and sum(ends) > 20
    assert flagged.sum() < len(outputs) * 3 // 4


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_greedy_picks_the_first_of_tied_largest_logits_as_argmax(dtype):
    import torch

    from ets.engine.sampling import SamplingParams, sample

    logits = torch.randn(64, 3000, generator=torch.Generator().manual_seed(0)).to(getattr(torch, dtype))
    logits[:32, 2900] = logits[:32, 7] = 50.0  # ties: the lower index wins
    logits[40] = 0.0                          # a row of nothing but ties
    picked = sample(logits, SamplingParams(temperature=0), None, None)
    assert picked == logits.argmax(dim=-1).tolist() and picked[:32] == [7] * 32 and picked[40] == 0
