"""Tiny stand-ins for the PRM checkpoints users bring, saved in Hugging Face format with
the special tokens, chat templates and weight layouts of the real ones (random weights, so
the scores are noise; each head is scaled up so they spread out).

    qwen_math_prm     Qwen2.5-Math-PRM: `<extra_0>`, a Qwen chat template, its own modelling
                      code (`Qwen2ForProcessRewardModel` in modeling_qwen2_rm.py, via auto_map)
    token_classifier  an `*ForTokenClassification` with `num_labels` outputs (1: a value head)
    skywork_prm       Skywork-o1-Open-PRM: a Qwen2 causal LM plus `v_head.summary` = Linear(hidden, 1)
    chat_judge        RLHFlow-style: a Llama causal LM with a Llama-3-like chat template
    bare_body         a body without any head (`Qwen2Model`)
    causal_lm         a plain causal LM (tiny:llama saved to disk)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ets.models.tiny import build_tokenizer, save_tiny_model, tiny_config

QWEN_CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA3_CHAT = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

# Qwen2.5-Math-PRM's own modelling code, reduced to what loading and scoring use.
QWEN_PRM_CODE = '''
from torch import nn
from transformers import Qwen2Model, Qwen2PreTrainedModel
from transformers.modeling_outputs import TokenClassifierOutput


class Qwen2ForProcessRewardModel(Qwen2PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = Qwen2Model(config)
        h = config.hidden_size
        self.score = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 2))
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kwargs):
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).last_hidden_state
        return TokenClassifierOutput(logits=self.score(hidden))
'''


def tokenizer(specials=(), chat_template=None):
    tok = build_tokenizer()
    if specials:
        tok.add_special_tokens({"additional_special_tokens": list(specials)})
    if chat_template:
        tok.chat_template = chat_template
    return tok


def _save(model, tok, path: Path, architectures=None, **config_extra) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    if architectures or config_extra:
        cfg_path = path / "config.json"
        cfg = json.loads(cfg_path.read_text())
        if architectures:
            cfg["architectures"] = architectures
        cfg.update(config_extra)
        cfg_path.write_text(json.dumps(cfg, indent=2))
    return path


def vocab_rows(tok) -> int:
    """Embedding rows for `tok`, padded to a multiple of 64 as real checkpoints pad theirs
    (Qwen2.5: 151,936 rows for 151,665 tokens): a tokenizer class may add a token when the
    folder is loaded again (Qwen2Tokenizer adds <|endoftext|>), and a model whose tokenizer
    outgrows its embedding is refused when it loads."""
    return (len(tok) // 64 + 1) * 64


def _config(arch, tok, **extra):
    return tiny_config(arch, vocab_size=vocab_rows(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                       pad_token_id=tok.pad_token_id, **extra)


def qwen_math_prm(path: Path, with_auto_map: bool = True) -> Path:
    import importlib.util

    path.mkdir(parents=True, exist_ok=True)
    (path / "modeling_qwen2_rm.py").write_text(QWEN_PRM_CODE)
    spec = importlib.util.spec_from_file_location("_tiny_qwen2_rm", path / "modeling_qwen2_rm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tok = tokenizer(["<extra_0>", "<|im_start|>", "<|im_end|>"], QWEN_CHAT)
    torch.manual_seed(0)
    model = module.Qwen2ForProcessRewardModel(_config("qwen2", tok))
    with torch.no_grad():
        model.score[2].weight.mul_(30.0)
    auto_map = {"auto_map": {"AutoModel": "modeling_qwen2_rm.Qwen2ForProcessRewardModel"}} if with_auto_map else {}
    return _save(model, tok, path, ["Qwen2ForProcessRewardModel"], **auto_map)


def token_classifier(path: Path, num_labels: int = 2, arch: str = "qwen2", specials=("<extra_0>",), chat_template=None) -> Path:
    from transformers import AutoModelForTokenClassification

    tok = tokenizer(specials, chat_template)
    torch.manual_seed(1)
    model = AutoModelForTokenClassification.from_config(_config(arch, tok, num_labels=num_labels))
    with torch.no_grad():
        model.score.weight.mul_(8.0)
    return _save(model, tok, path)


def skywork_prm(path: Path, outputs: int = 1) -> Path:
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    tok = tokenizer()
    torch.manual_seed(2)
    model = AutoModelForCausalLM.from_config(_config("qwen2", tok))
    _save(model, tok, path, ["Qwen2ForPrmModel"])
    weights = load_file(path / "model.safetensors")
    weights["v_head.summary.weight"] = torch.randn(outputs, model.config.hidden_size) * 0.5
    weights["v_head.summary.bias"] = torch.zeros(outputs)
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    return path


def chat_judge(path: Path, chat_template: str | None = LLAMA3_CHAT) -> Path:
    from transformers import AutoModelForCausalLM

    tok = tokenizer(["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], chat_template)
    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_config(_config("llama", tok))
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return _save(model, tok, path)


def bare_body(path: Path) -> Path:
    from transformers import AutoModel

    tok = tokenizer(["<extra_0>"])
    torch.manual_seed(4)
    return _save(AutoModel.from_config(_config("qwen2", tok)), tok, path)


def causal_lm(path: Path) -> Path:
    return save_tiny_model(path, "llama")
