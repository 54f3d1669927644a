"""The engine on a real pretrained model, SmolLM2-135M-Instruct (tests/real_model.py): the
converted folder loads by path as users pass it, and the engine's greedy tokens are
transformers' own on GSM8K questions in the model's chat format."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ets.engine import Engine
from tests.real_model import gsm8k_questions

pytestmark = pytest.mark.real_model

NEW_TOKENS = 128
TIE = 1e-4


@pytest.fixture(scope="module")
def model_tok(smollm2):
    return AutoModelForCausalLM.from_pretrained(smollm2).eval(), AutoTokenizer.from_pretrained(smollm2)


def chat_prompt(tok, question: str) -> list[int]:
    """The question as a user turn in the model's chat template, ready for the answer."""
    text = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False)
    return tok(text, add_special_tokens=False).input_ids


def hf_greedy(model, prompt: list[int]) -> list[int]:
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW_TOKENS)
    return out[0, len(prompt):].tolist()


def test_the_converted_folder_is_a_plain_float32_llama_with_a_chat_template(smollm2, model_tok):
    model, tok = model_tok
    config = model.config
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == torch.float32
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (30, 9, 3)
    assert config.vocab_size == len(tok) == 49152
    assert getattr(config, "quantization_config", None) is None  # dequantised: no GGUF file needed to load it
    # ChatML: <|im_start|> opens a turn (and is the BOS), <|im_end|> closes it and ends a generation
    assert (tok.bos_token, tok.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert config.eos_token_id == model.generation_config.eos_token_id == tok.eos_token_id == 2
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    prompt = chat_prompt(tok, "What is 2+3?")
    assert tok.decode(prompt).endswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")
    # Real weights, dequantised right: the model answers a sum it can do, and stops.
    answer = tok.decode(hf_greedy(model, prompt))
    assert "5" in answer and answer.endswith("<|im_end|>"), answer


def test_engine_greedy_tokens_are_transformers_on_gsm8k(model_tok):
    """Ten GSM8K questions, 128 new tokens each, all in one engine call: token for token
    transformers' greedy `generate`, or, where the two part, the two tokens they chose
    tie for the best logit within 1e-4 there (float rounding may pick either)."""
    model, tok = model_tok
    prompts = [chat_prompt(tok, q) for q in gsm8k_questions(10)]
    engine = Engine(model, tok, kv_budget_tokens=4096)
    outs = engine.generate(prompts, max_new_tokens=NEW_TOKENS, temperature=0)
    engine.check()
    matched, parted = 0, []
    for i, (prompt, got) in enumerate(zip(prompts, outs)):
        want = hf_greedy(model, prompt)
        if got == want:
            matched += 1
            continue
        k = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), None)
        assert k is not None, f"question {i}: one output is a prefix of the other ({len(got)} vs {len(want)} tokens)"
        with torch.no_grad():
            logits = model(torch.tensor([prompt + want[:k]])).logits[0, -1]
        gap = float(logits.max() - logits[[got[k], want[k]]].min())
        assert gap < TIE, (f"question {i}: the engine chose token {got[k]} and transformers {want[k]} at new token "
                           f"{k}, {gap:.2e} apart in logit (a tie is within {TIE})")
        parted.append(i)
    assert matched >= 8, f"only {matched} of 10 questions match token for token (parted at ties: {parted})"
