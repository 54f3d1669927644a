"""Finding the step markers' tokens in one tokenization of the whole text."""

import pytest

from ets.rewards.marking import (
    SENTINEL, MarkerError, chat_pieces, fill, join_marked, mark_steps, split_template, tokenize_marked, tokenize_pieces,
)


class FakeTokenizer:
    """Returns fixed tokens: [(id, start, end), ...] for any text."""

    def __init__(self, tokens):
        self.tokens = tokens

    def __call__(self, text, add_special_tokens, return_offsets_mapping):
        return {"input_ids": [t[0] for t in self.tokens], "offset_mapping": [(t[1], t[2]) for t in self.tokens]}


def test_mark_steps_records_each_markers_span():
    marked = mark_steps("Q ", ["a", "bc"], " ки", "\n", tail="!")
    assert marked.text == "Q a ки\nbc ки!"
    assert [marked.text[s:e] for s, e in marked.spans] == [" ки", " ки"]


def test_marker_found_at_the_token_holding_its_last_character():
    marked = mark_steps("", ["a", "b"], "+", "")          # "a+b+"
    tok = FakeTokenizer([(1, 0, 0), (10, 0, 1), (5, 1, 2), (11, 2, 3), (5, 3, 4)])  # BOS first
    assert tokenize_marked(tok, marked, 5, True) == ([1, 10, 5, 11, 5], [2, 4])


def test_marker_merged_with_a_neighbour_is_found_by_its_id_or_named():
    marked = mark_steps("", ["a"], " ки", "", tail="\n")    # "a ки\n", marker span [1, 4)
    # " к" | "и\n": the marker's last character sits in a merged token; its id is elsewhere.
    merged = FakeTokenizer([(10, 0, 1), (9, 1, 3), (8, 3, 5)])
    assert tokenize_marked(merged, marked, 9, False)[1] == [1]
    lost = FakeTokenizer([(10, 0, 1), (7, 1, 3), (8, 3, 5)])
    with pytest.raises(MarkerError, match="step 0 was merged"):
        tokenize_marked(lost, marked, 9, False)


def test_template_needs_question_and_one_steps_placeholder():
    assert split_template("# Q\n{question}\n# A\n{steps}\n", "template") == ("# Q\n{question}\n# A\n", "\n")
    for bad in ("{steps}", "{question}", "{question}{steps}{steps}"):
        with pytest.raises(ValueError, match="template"):
            split_template(bad, "template")


def sentencepiece_like_tokenizer():
    """Llama/Mistral-style pieces: spaces become '▁' glued to the next word, BOS added."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for c in sorted(set("▁abQ?0123456789+-=\nки")) + ["▁к", "▁ки", "▁+", "▁-"]:
        vocab.setdefault(c, len(vocab))
    core = Tokenizer(models.BPE(vocab=vocab, merges=[("▁", "к"), ("▁к", "и"), ("▁", "+"), ("▁", "-")], unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    core.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    core.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def test_math_shepherd_style_pieces_are_found():
    from ets.rewards.marking import token_id

    tok = sentencepiece_like_tokenizer()
    tag = token_id(tok, " ки", "step tag")
    assert tok.convert_ids_to_tokens([tag, token_id(tok, "+", "good token")]) == ["▁ки", "▁+"]
    ids, positions = tokenize_marked(tok, mark_steps("Q? ", ["a = 1", "b + 2"], " ки", "\n"), tag, True)
    assert ids[0] == 1 and [ids[p] for p in positions] == [tag, tag] and positions[-1] == len(ids) - 1


def merging_tokenizer():
    """Byte-level BPE whose one merge is "." + "\n" -> ".\n" (as Qwen's tokenizer merges them)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {sym: i for i, sym in enumerate(alphabet)}
    vocab[".Ċ"] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[(".", "Ċ")]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core)


def test_join_marked_puts_a_marker_between_pieces():
    marked = join_marked(["Q? a", "\nb", ""], " ки")
    assert marked.text == "Q? a ки\nb ки" and marked.spans == [(4, 7), (9, 12)]
    assert join_marked(["only"], "+")[:2] == ("only", [])
    assert mark_steps("H", [], "+", "\n", "T")[:2] == ("HT", [])
    # mark_steps also knows where each step's own text is (the surprise readout needs it)
    marked = mark_steps("Q? ", ["a", "bc"], " ки", "\n")
    assert marked.text == "Q? a ки\nbc ки" and [marked.text[a:b] for a, b in marked.steps] == ["a", "bc"]


def test_pieces_keep_a_marker_that_the_whole_text_merges():
    tok = merging_tokenizer()
    newline = tok.encode("\n")[0]
    marked = mark_steps("Q\n", ["a.", "b."], "\n", "")          # "Q\na.\nb.\n": ".\n" merges
    with pytest.raises(MarkerError, match="merged"):
        tokenize_marked(tok, marked, newline, False)
    ids, positions = tokenize_pieces(tok, marked, newline, False)
    assert ids == tok.encode("Q\n") + tok.encode("a.") + [newline] + tok.encode("b.") + [newline]
    assert positions == [4, 7] and all(ids[p] == newline for p in positions)


def test_chat_pieces_split_where_the_sentinels_were():
    from ets.models.tiny import build_tokenizer

    tok = build_tokenizer()
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": SENTINEL},
                {"role": "user", "content": "r"}, {"role": "assistant", "content": SENTINEL}]
    assert chat_pieces(tok, messages) == ["<user>q<assistant>", "<user>r<assistant>", ""]
    dropping = "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"
    with pytest.raises(MarkerError, match="rendered 0 of the 2 marked turns"):
        chat_pieces(tok, messages, dropping)


def test_fill_replaces_only_the_named_placeholders_in_one_pass():
    assert fill("{question} {step}", question="Is {step} \\boxed{x}?", step="a") == "Is {step} \\boxed{x}? a"
