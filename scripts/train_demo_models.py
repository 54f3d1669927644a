"""Train the demo policy and PRM from scratch, reproducibly by seed, on this CPU.

    python scripts/train_demo_models.py                  # -> ets/demo/checkpoints/{policy,prm}
    python scripts/train_demo_models.py --out /tmp/ck    # elsewhere
    python scripts/train_demo_models.py --stage steer --no-bf16 --out /tmp/ck \
        --policy-from ets/demo/checkpoints/policy --prm-from /tmp/base/ets/demo/checkpoints/prm
        # stage 6 alone; the shipped PRM is this on the PRM shipped before it, at commit 9418b23
        # (`git worktree add /tmp/base 9418b23`), /tmp/ck/prm then copied in

Stages (each seeded; 2 threads and bf16 autocast by default, about 1.8x faster than one
thread in fp32 on an AVX512-BF16 CPU; `--threads 1 --no-bf16` for the slow exact path):
1. Tokenizer: byte-level BPE trained on demo text with every digit its own token (so the
   models see numbers digit by digit), plus the step tag " ки"; "+" and "-" are byte
   tokens. Wrapped as a PreTrainedTokenizerFast; no BOS is added.
2. Policy: a small LlamaForCausalLM (4 layers, hidden 128, 4 heads) trained on reference
   solutions of train-split problems (random valid order, random wording): prompt =
   question + "\n", then the steps, each ending in "\n", then EOS. The loss covers the
   solution tokens only. It is stopped early on purpose, so search has room: validation
   accuracy per sample at T=1 / greedy was 0% / 1.6% at 600 steps, 7% / 25% at 1200,
   10% / 41% at 1500, 18% / 44% at 1800 (the shipped policy); with `--policy-cooldown 300`
   (the rate falling to 0 over the last 300 steps) 18.8% / 46.9% at 1200, in 10.6 min less.
   Batches are grouped by length and padded to multiples of 64 (see `length_grouped`, `pad_batch`).
3. PRM data: the policy samples solutions (temperature 1.0, on the KV engine:
   ets/app/samples.py) to fresh train-split problems; the step checker labels every
   step. Added: reference solutions twice, clean and with one step spoiled the ways the
   policy goes wrong (a count paired with another item's part, a count no item has,
   another item's count, a digit or a place of the price misread, the item restated
   wrongly alike, a sum of a value never computed, a result a digit off) and the steps
   after it built on the mistake (ets/demo/spoil.py).
4. PRM: the policy plus 2 decoder layers that start as the identity (see `deepen`),
   trained so that the logits at each " ки" tag of question + " " + step_1 + " ки\n" + ...
   predict "+" (good step) or "-" (bad step), plus the LM loss on the tokens of the correct
   steps (keeps the policy's arithmetic). The last 10% of the policy samples are held out
   and give the PRM's step AUC.
5. Surprise readout: the weights that read the PRM's tag together with its LM's surprise
   at each step's numbers (rewards/surprise.py), fitted on the policy's samples of 100
   validation-split problems (`fit_demo_surprise`; alone: scripts/fit_prm_surprise.py);
   they go into ets/demo/demo.yaml by hand (printed, and kept in training.json).
6. `--stage steer` (the shipped PRM is this stage's, run alone after the others: see
   training.json's "steer"; docs/results.md, "All five methods at W=64", has what
   it does to the search): the PRM of OUT/prm (or `--prm-from`) fine-tuned on the policy's own
   samples (8 to each of 600 fresh train-split problems, T=1.0), a batch being 4 problems'
   samples, on the PRM stage's loss plus a listwise term in REBASE's own terms (per
   problem and depth, -log of the softmax(P(+)/0.2) weight on the partial paths with no
   wrong step yet: ets/demo/steering.py); then the readout refitted. Saved to OUT/prm;
   its figures go into OUT/training.json under "steer". 300 steps took 14-18 min in fp32
   (`--no-bf16`) on 2 threads, sampling 4-12 min, the readout 2-3 min (28 min in all on the
   shipped run, the machine partly shared). Its weights depend on the CPU's float kernels:
   the same command on an AVX2 and an AVX-512 EPYC sampled data of the same counts and
   trained two PRMs of the recipe (the shipped one is the second's).
Both checkpoints are saved in Hugging Face format (safetensors) with their tokenizer.
`--stage policy` / `--stage prm` run the two halves separately (prm reuses OUT/policy, or
`--policy-from` a snapshot that `--snapshots` saved at every evaluation). The shipped run
(the defaults, as two stages, then `--stage steer`) took 55.5 + 28 min on this 2-core CPU:
policy 32 min, PRM data 3.3 min, PRM 20 min, steering 28 min; see
ets/demo/checkpoints/training.json.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ets.demo import (BAD_TOKEN, CHECKPOINTS, GOOD_TOKEN, PROMPT_TEMPLATE, STEP_TAG, check_steps,  # noqa: E402
                      generate_problem, generate_split, is_correct_solution, reference_solution, split_of)
from ets.demo.spoil import spoiled_twins  # noqa: E402
from ets.demo.metrics import roc_auc  # noqa: E402
from ets.demo.steering import steering_loss  # noqa: E402
from ets.app.demo import fit_demo_surprise, prm_scores  # noqa: E402
from ets.app.samples import sample_solutions  # noqa: E402
from ets.demo.hf import prm_text, single_token_id  # noqa: E402
from ets.rewards.surprise import WEIGHTS  # noqa: E402

BOS, EOS, PAD = "<s>", "</s>", "<pad>"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def train_problems(rng: random.Random, n: int):
    out = []
    while len(out) < n:
        p = generate_problem(rng)
        if split_of(p) == "train":
            out.append(p)
    return out


# ---------------------------------------------------------------- tokenizer
def build_tokenizer(seed: int, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(f"tok:{seed}")
    corpus = []
    for p in train_problems(rng, 3000):
        steps = reference_solution(p, rng)
        corpus.append(PROMPT_TEMPLATE.format(question=p.question) + "\n".join(steps) + "\n")
        corpus.append(prm_text(p.question, steps))
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(corpus, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD)
    tok.add_tokens([STEP_TAG])
    for t in (STEP_TAG, GOOD_TOKEN, BAD_TOKEN, "\n"):
        single_token_id(tok, t)
    sample = corpus[0]
    assert tok.decode(tok.encode(sample)) == sample, "tokenizer does not round-trip"
    return tok


# ---------------------------------------------------------------- batches
def pad_batch(seqs: list[list[int]], labels: list[list[int]], pad_id: int, multiple: int = 64):
    """Right-padded ids, attention mask and labels. The width is rounded up to `multiple`:
    with bf16 autocast the CPU kernels are compiled per shape, and a new width every step
    cost more than its padding (about 1.3 s a step against 0.93 on 300-500-token texts)."""
    width = -(-max(len(s) for s in seqs) // multiple) * multiple
    ids = torch.full((len(seqs), width), pad_id)
    lab = torch.full((len(seqs), width), -100)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, l) in enumerate(zip(seqs, labels)):
        ids[i, :len(s)] = torch.tensor(s)
        lab[i, :len(l)] = torch.tensor(l)
        att[i, :len(s)] = 1
    return ids, att, lab


def prm_batch(examples, pad_id: int):
    """ids, attention mask, tag labels and LM labels of PRM examples (prm_example's
    (ids, tag labels, LM labels)), padded alike."""
    ids, att, lab = pad_batch([e[0] for e in examples], [e[1] for e in examples], pad_id)
    lm = pad_batch([e[0] for e in examples], [e[2] for e in examples], pad_id)[2]
    return ids, att, lab, lm


def length_grouped(draw, batch: int, rng: random.Random | None = None, group: int = 8):
    """Batches of examples from `draw(n)`, grouped by length: `group` batches' worth of
    random examples, sorted by length, cut into batches served in random order. Every
    batch is still a random draw, but rows pad to their neighbours' length: on the demo's
    150-500-token texts a step costs about 2/3 of a random batch's (attention is
    quadratic in the padded width)."""
    rng = rng or random.Random(0)
    while True:
        pool = sorted(draw(group * batch), key=lambda e: len(e[0]))
        chunks = [pool[i:i + batch] for i in range(0, len(pool), batch)]
        rng.shuffle(chunks)
        yield from chunks


def policy_example(tok, p, rng):
    """Prompt tokens masked out; the model learns the solution and the EOS after it."""
    prompt = tok.encode(PROMPT_TEMPLATE.format(question=p.question))
    sol = tok.encode("\n".join(reference_solution(p, rng)) + "\n") + [tok.eos_token_id]
    return prompt + sol, [-100] * len(prompt) + sol


def prm_example(tok, question, steps, labels, good, bad, tag):
    """(ids, tag targets, LM targets) of one PRM training text.

    Tag targets: the logits at each tag predict "+" or "-". Causal-LM targets are shifted
    by one (target[t+1] is predicted at t), so a tag at t puts its target at t+1; a pad
    token appended after the last tag holds the last one.
    LM targets: the tokens of the *correct* steps, so the PRM keeps the policy's arithmetic
    while it learns to judge (a PRM trained on the tags alone drifts into a shallow
    classifier and stalls).
    """
    text = prm_text(question, steps)
    enc = tok(text, return_offsets_mapping=True)
    ids = enc["input_ids"] + [tok.pad_token_id]
    tags = [t for t, i in enumerate(ids) if i == tag]
    assert len(tags) == len(labels), "every step must end in exactly one tag"
    lab = [-100] * len(ids)
    lm = [-100] * len(ids)
    for t, ok in zip(tags, labels):
        lab[t + 1] = good if ok else bad
    pos = len(question) + 1                      # where step 0 starts in `text`
    spans = []
    for st in steps:
        st = st.strip()
        spans.append((pos, pos + len(st)))
        pos += len(st) + len(STEP_TAG) + 1
    for t, (a, b) in enumerate(enc["offset_mapping"]):
        for (s0, s1), ok in zip(spans, labels):
            if ok and s0 - 1 <= a < s1 and t > 0 and lab[t] == -100:   # s0 - 1: a merged leading space
                lm[t] = ids[t]
    return ids, lab, lm


def prm_loss(model, ids, att, lab, lm, lm_weight):
    """Mean CE at the tag targets + lm_weight * mean CE at the LM targets."""
    return prm_logits_loss(model(input_ids=ids, attention_mask=att).logits[:, :-1].float(), lab, lm, lm_weight)


def prm_logits_loss(logits, lab, lm, lm_weight):
    """`prm_loss` from the shifted logits [B, T-1, V] (the steering stage reads them too)."""
    ce = torch.nn.functional.cross_entropy
    tag_loss = ce(logits.reshape(-1, logits.shape[-1]), lab[:, 1:].reshape(-1), ignore_index=-100)
    if lm_weight <= 0:
        return tag_loss
    lm_loss = ce(logits.reshape(-1, logits.shape[-1]), lm[:, 1:].reshape(-1), ignore_index=-100)
    return tag_loss + lm_weight * lm_loss


def inv_sqrt_lr(step, peak, warmup, steps=0, cooldown=0):
    """Linear warm-up, then peak * sqrt(warmup / step). Without a cooldown (the shipped
    recipe) it does not depend on the run's length, so the policy after k steps of a
    longer run is the policy of a k-step run. With one, the last `cooldown` of the run's
    `steps` fall linearly from that rate towards 0 (a stable phase, then a decay: it let
    the policy reach in 1,200 steps what the plain schedule reaches in 1,800;
    the PRM trained on that policy then read a lower held-out AUC)."""
    if cooldown and step >= steps - cooldown:
        start = steps - cooldown
        return inv_sqrt_lr(start, peak, warmup) * (steps - step) / cooldown
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * math.sqrt(warmup / (step + 1))


def train_loop(model, make_batch, steps, lr, warmup, what, log_every=100, evaluate=None, eval_every=0,
               loss_fn=None, bf16=False, cooldown=0):
    """AdamW steps on `loss_fn(model, *batch)` (default: the causal-LM loss of
    (ids, attention, labels)); every `eval_every` steps, `evaluate(model, step)`."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    model.train()
    t0, running = time.time(), 0.0
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = inv_sqrt_lr(step, lr, warmup, steps, cooldown)
        batch = make_batch(step)
        # bf16 autocast: the weights and optimizer stay fp32; ~1.4-1.8x faster on CPUs with
        # AVX512-BF16 (in a trial, bf16 and fp32 PRMs reached the same held-out AUC, 0.81).
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if loss_fn is None:
                ids, att, lab = batch
                loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
            else:
                loss = loss_fn(model, *batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        running += loss.item()
        if (step + 1) % log_every == 0:
            log(f"{what} step {step + 1}/{steps} loss {running / log_every:.4f} ({time.time() - t0:.0f}s)")
            running = 0.0
        if evaluate and eval_every and (step + 1) % eval_every == 0:
            model.eval()
            log(f"{what} step {step + 1}: {evaluate(model, step + 1)}")
            model.train()
    model.eval()
    return model


# ---------------------------------------------------------------- stages
def train_policy(tok, args):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=args.hidden, intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=args.kv_heads,
        max_position_embeddings=1024, tie_word_embeddings=True, rope_theta=10000.0,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)
    rng = random.Random(f"policy:{args.seed}")
    log(f"policy: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")

    def draw(n):
        return [policy_example(tok, p, rng) for p in train_problems(rng, n)]

    batches = length_grouped(draw, args.batch)

    def make_batch(step):
        ex = next(batches)
        return pad_batch([e[0] for e in ex], [e[1] for e in ex], tok.pad_token_id)

    val = generate_split("validation", 64, args.seed)

    t_start = time.time()

    def evaluate(m, step):
        if args.snapshots:          # the policy of a `step`-step run (the schedule does not depend on the length)
            save(m, tok, args.out / f"policy-step{step}")
            (args.out / f"policy-step{step}" / "snapshot.json").write_text(
                json.dumps({"policy_steps": step, "policy_seconds": round(time.time() - t_start)}) + "\n")
        sols = sample_solutions(m, tok, [p.question for p in val], n=2, temperature=1.0, seed=args.seed)
        acc = sum(is_correct_solution(p, s) for p, ss in zip(val, sols) for s in ss) / (2 * len(val))
        greedy = sample_solutions(m, tok, [p.question for p in val], n=1, temperature=0)
        g_acc = sum(is_correct_solution(p, ss[0]) for p, ss in zip(val, greedy)) / len(val)
        return f"validation accuracy: sampled (T=1) {acc:.1%}, greedy {g_acc:.1%}"

    return train_loop(model, make_batch, args.policy_steps, args.policy_lr, 200, "policy",
                      evaluate=evaluate, eval_every=args.eval_every, bf16=args.bf16, cooldown=args.policy_cooldown)


def sample_prm_data(policy, tok, args):
    rng = random.Random(f"prm-data:{args.seed}")
    problems = train_problems(rng, args.prm_problems)
    samples = sample_solutions(policy, tok, [p.question for p in problems], n=args.prm_samples,
                               temperature=1.0, seed=args.seed)
    data = []
    for p, trajs in zip(problems, samples):
        for steps in trajs:
            if steps:
                data.append((p.question, steps, check_steps(p, steps)))
    n_steps = sum(len(d[2]) for d in data)
    n_bad = sum(not ok for d in data for ok in d[2])
    log(f"PRM data: {len(data)} policy trajectories, {n_steps} steps, {n_bad / max(1, n_steps):.1%} bad")
    return data


def corrupted_data(n: int, seed: int):
    """n train-split reference solutions, each twice: clean, and spoiled with the steps
    after it built on the mistake (ets/demo/spoil.py), labelled by the checker."""
    rng = random.Random(f"prm-synthetic:{seed}")
    return spoiled_twins(train_problems(rng, n), rng)


def deepen(policy, extra_layers: int):
    """The policy with `extra_layers` more decoder layers on top, each starting as the
    identity (attention and MLP output projections zero), so the PRM starts as the policy.

    Why: a step's verdict is read at its tag, after the step, so it must compare what the
    policy's layers computed along the step (e.g. the product it expected) with what was
    written; fresh layers on top of the policy's own do that better than reusing them
    (trials, held-out step AUC: 0.81 for a 4-layer PRM -> 0.83 with 2 more, same data and
    steps; with the shipped policy 0.89, against 0.86 for a 4-layer PRM trained longer)."""
    import copy

    from transformers import LlamaForCausalLM

    if extra_layers == 0:
        return copy.deepcopy(policy)
    config = copy.deepcopy(policy.config)
    config.num_hidden_layers += extra_layers
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(policy.state_dict(), strict=False)
    assert not unexpected and all(".layers." in k for k in missing), (missing, unexpected)
    for layer in model.model.layers[-extra_layers:]:
        torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
        torch.nn.init.zeros_(layer.mlp.down_proj.weight)
    return model


def train_prm(policy, tok, data, args):
    model = deepen(policy, args.prm_extra_layers)
    tag = single_token_id(tok, STEP_TAG)
    good, bad = single_token_id(tok, GOOD_TOKEN), single_token_id(tok, BAD_TOKEN)
    examples = []
    for q, steps, labels in data:
        examples.append(prm_example(tok, q, steps, labels, good, bad, tag))
    rng = random.Random(f"prm:{args.seed}")
    torch.manual_seed(args.seed)
    batches = length_grouped(lambda n: rng.sample(examples, n), args.batch, rng)

    def make_batch(step):
        return prm_batch(next(batches), tok.pad_token_id)

    return train_loop(model, make_batch, args.prm_steps, args.prm_lr, 100, "prm",
                      loss_fn=lambda m, *b: prm_loss(m, *b, lm_weight=args.prm_lm_weight), bf16=args.bf16,
                      cooldown=args.prm_cooldown)


# Sampling streams of the steering stage's data: apart from the PRM stage's (which uses the seed itself).
STEER_STREAMS = 11


def steer_data(policy, tok, args):
    """The steering stage's samples: `steer_samples` solutions to each of `steer_problems`
    fresh train-split problems (T=1.0), every step labelled by the checker; per problem
    (those with two samples or more: a lone sample has no rival at any depth)."""
    problems = train_problems(random.Random(f"steer-data:{args.seed}"), args.steer_problems)
    samples = sample_solutions(policy, tok, [p.question for p in problems], n=args.steer_samples,
                               temperature=1.0, seed=args.seed + STEER_STREAMS)
    groups = [[(p.question, s, check_steps(p, s)) for s in trajs if s] for p, trajs in zip(problems, samples)]
    n_steps = sum(len(x[2]) for g in groups for x in g)
    n_bad = sum(not ok for g in groups for x in g for ok in x[2])
    log(f"steering data: {sum(map(len, groups))} policy trajectories of {len(groups)} problems, {n_steps} steps, "
        f"{n_bad / max(1, n_steps):.1%} bad")
    return [g for g in groups if len(g) >= 2]


def train_steer(prm, tok, groups, args):
    """The PRM fine-tuned on `groups` (steer_data): the PRM stage's loss (CE at the tags, LM
    on the correct steps) plus `steer_weight` x the listwise steering term."""
    tag = single_token_id(tok, STEP_TAG)
    good, bad = single_token_id(tok, GOOD_TOKEN), single_token_id(tok, BAD_TOKEN)
    examples = [[(prm_example(tok, q, steps, labels, good, bad, tag), steps, labels) for q, steps, labels in g]
                for g in groups]
    rng = random.Random(f"steer:{args.seed}")
    torch.manual_seed(args.seed)

    def make_batch(step):
        chosen = rng.sample(examples, args.steer_per_batch)
        rows = [r for g in chosen for r in g]
        ids, att, lab, lm = prm_batch([e for e, _, _ in rows], tok.pad_token_id)
        sizes = [len(g) for g in chosen]
        return ids, att, lab, lm, sizes, [(s, labels) for _, s, labels in rows]

    def loss_fn(model, ids, att, lab, lm, sizes, rows):
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
        loss = prm_logits_loss(logits, lab, lm, args.prm_lm_weight)
        at = (lab[:, 1:] != -100).nonzero()               # (row, position) of every tag, in step order
        scores = torch.sigmoid(logits[at[:, 0], at[:, 1], good] - logits[at[:, 0], at[:, 1], bad])
        where: list[list[int]] = [[] for _ in rows]
        for k, r in enumerate(at[:, 0].tolist()):
            where[r].append(k)
        problems, start = [], 0
        for n in sizes:
            problems.append([(*rows[r], where[r]) for r in range(start, start + n)])
            start += n
        steer = steering_loss(scores, problems, args.steer_temperature)
        return loss if steer is None else loss + args.steer_weight * steer

    return train_loop(prm, make_batch, args.steer_steps, args.steer_lr, 20, "steer", log_every=25,
                      loss_fn=loss_fn, bf16=args.bf16)


def steer(args) -> None:
    """Stage `steer`: fine-tune OUT/prm (or --prm-from) to steer REBASE, refit its readout."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    source = args.prm_from or args.out / "prm"
    policy = AutoModelForCausalLM.from_pretrained(args.policy_from or args.out / "policy").eval()
    prm = AutoModelForCausalLM.from_pretrained(source)
    tok = AutoTokenizer.from_pretrained(source)
    groups = steer_data(policy, tok, args)
    t_data = time.time() - t0
    prm = train_steer(prm, tok, groups, args)
    t_train = time.time() - t0 - t_data
    save(prm, tok, args.out / "prm")
    readout, fit = fit_demo_surprise(policy, tok, prm, tok)
    weights = {k: round(getattr(readout, k), 4) for k in WEIGHTS}
    log(f"surprise readout (ets/demo/demo.yaml reward.options.surprise): {weights}; in-sample step AUC on "
        f"{fit['steps']} validation steps: tag {fit['auc_tag']:.3f}, readout {fit['auc_readout']:.3f}")
    record = args.out / "training.json"
    info = json.loads(record.read_text()) if record.exists() else {}
    info["steer"] = dict(prm_from=_shown(source), seed=args.seed, threads=args.threads, bf16=args.bf16,
                         problems=args.steer_problems, samples=args.steer_samples, steps=args.steer_steps,
                         lr=args.steer_lr, weight=args.steer_weight, temperature=args.steer_temperature,
                         per_batch=args.steer_per_batch, data_seconds=round(t_data), train_seconds=round(t_train),
                         total_seconds=round(time.time() - t0), surprise=weights)
    record.write_text(json.dumps(info, indent=2) + "\n")
    log(f"done in {(time.time() - t0) / 60:.1f} min; the steered PRM in {args.out / 'prm'}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=CHECKPOINTS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-bf16", dest="bf16", action="store_false", help="train in fp32 (bf16 autocast by default)")
    ap.add_argument("--vocab-size", type=int, default=640)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=4, help="key-value heads (of 4 attention heads)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--policy-steps", type=int, default=1800)
    ap.add_argument("--eval-every", type=int, default=600, help="policy validation every N steps (0: never)")
    ap.add_argument("--policy-lr", type=float, default=3e-3)
    ap.add_argument("--policy-cooldown", type=int, default=0,
                    help="the policy's last N steps decay the learning rate linearly towards 0 (0: none, the shipped "
                         "recipe; with one, a snapshot at step k is not a k-step run)")
    ap.add_argument("--snapshots", action="store_true", help="save the policy at every evaluation")
    ap.add_argument("--stage", choices=("all", "policy", "prm", "steer"), default="all",
                    help="prm: reuse OUT/policy and train only the PRM; steer: fine-tune OUT/prm to steer REBASE")
    ap.add_argument("--policy-from", type=Path, help="with --stage prm: the policy to use (e.g. a snapshot "
                    "OUT/policy-stepN of a --snapshots run); it is saved as OUT/policy. With --stage steer: "
                    "the policy that samples (default OUT/policy; not saved)")
    ap.add_argument("--prm-problems", type=int, default=800)
    ap.add_argument("--prm-samples", type=int, default=4)
    ap.add_argument("--prm-synthetic", type=int, default=3000,
                    help="reference solutions added twice: clean, and spoiled (see corrupted_data)")
    ap.add_argument("--prm-steps", type=int, default=800)
    ap.add_argument("--prm-extra-layers", type=int, default=2, help="decoder layers the PRM adds on top of the policy's")
    ap.add_argument("--prm-lm-weight", type=float, default=1.0, help="weight of the LM loss on correct steps")
    ap.add_argument("--prm-lr", type=float, default=1e-3)
    ap.add_argument("--prm-cooldown", type=int, default=0, help="as --policy-cooldown, for the PRM stage")
    ap.add_argument("--prm-from", type=Path, help="with --stage steer: the PRM to fine-tune (default OUT/prm)")
    ap.add_argument("--steer-problems", type=int, default=600)
    ap.add_argument("--steer-samples", type=int, default=8)
    ap.add_argument("--steer-per-batch", type=int, default=4, help="problems a batch (all their samples)")
    ap.add_argument("--steer-steps", type=int, default=300)
    ap.add_argument("--steer-lr", type=float, default=3e-4)
    ap.add_argument("--steer-weight", type=float, default=1.0, help="weight of the listwise steering term")
    ap.add_argument("--steer-temperature", type=float, default=0.2, help="REBASE's softmax temperature")
    args = ap.parse_args(argv)
    for name, steps, cooldown in (("policy", args.policy_steps, args.policy_cooldown),
                                  ("prm", args.prm_steps, args.prm_cooldown)):
        if not 0 <= cooldown <= steps:
            ap.error(f"--{name}-cooldown {cooldown}: give 0 to {steps} (--{name}-steps)")

    torch.set_num_threads(args.threads)
    if args.bf16 and not native_bf16():
        log("warning: this CPU has no native bfloat16 (AVX512-BF16 or AMX), so bf16 autocast is emulated: "
            "a linear layer's forward and backward ran 15x slower than in fp32 on an AVX2 AMD EPYC. "
            "--no-bf16 trains in fp32 (other arithmetic than the shipped checkpoints', so other models)")
    if args.stage == "steer":
        steer(args)
        return
    t0 = time.time()
    if args.stage == "prm":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        source = args.policy_from or args.out / "policy"
        policy = AutoModelForCausalLM.from_pretrained(source).eval()
        tok = AutoTokenizer.from_pretrained(source)
        if args.policy_from:                    # a snapshot: it becomes OUT/policy
            save(policy, tok, args.out / "policy")
        # the seconds the policy took (a snapshot's own record, or the policy stage's)
        record = source / "snapshot.json" if (source / "snapshot.json").exists() else args.out / "training.json"
        done = json.loads(record.read_text()) if record.exists() else {}
        t0 -= done.get("policy_seconds", 0)
        args.policy_steps = done.get("policy_steps", args.policy_steps)
    else:
        tok = build_tokenizer(args.seed, args.vocab_size)
        log(f"tokenizer: {len(tok)} tokens")
        policy = train_policy(tok, args)
        save(policy, tok, args.out / "policy")
    t_policy = time.time() - t0
    if args.stage == "policy":
        (args.out / "training.json").write_text(json.dumps(
            dict(vars(args), out=_shown(args.out), policy_seconds=round(t_policy)), indent=2, default=str) + "\n")
        return
    data = sample_prm_data(policy, tok, args)
    t_data = time.time() - t0 - t_policy
    n_val = max(1, len(data) // 10)                     # the last 10% checks the PRM
    train = data[:-n_val] + corrupted_data(args.prm_synthetic, args.seed)
    prm = train_prm(policy, tok, train, args)
    t_prm = time.time() - t0 - t_policy - t_data
    val = data[-n_val:]
    scores = prm_scores(prm, tok, [d[0] for d in val], [[d[1]] for d in val])
    auc = roc_auc([ok for d in val for ok in d[2]], [s for sc in scores for s in sc[0]])
    save(prm, tok, args.out / "prm")
    log(f"PRM step AUC on held-out train-split samples: {auc:.3f}")
    readout, fit = fit_demo_surprise(policy, tok, prm, tok)
    weights = {k: round(getattr(readout, k), 4) for k in WEIGHTS}
    log(f"surprise readout (ets/demo/demo.yaml reward.options.surprise): {weights}; in-sample step AUC on "
        f"{fit['steps']} validation steps: tag {fit['auc_tag']:.3f}, readout {fit['auc_readout']:.3f}")
    total = time.time() - t0
    info = dict(vars(args), out=_shown(args.out), policy_from=args.policy_from and _shown(args.policy_from),
                policy_seconds=round(t_policy), prm_data_seconds=round(t_data),
                prm_seconds=round(t_prm), total_seconds=round(total), prm_val_auc=round(auc, 4),
                prm_surprise=weights)
    (args.out / "training.json").write_text(json.dumps(info, indent=2) + "\n")
    log(f"done in {total / 60:.1f} min; checkpoints in {args.out}")


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (oneDNN's own check; True if unknown)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return True


def _shown(path: Path) -> str:
    """`path` relative to the repository when inside it (training.json ships)."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def save(model, tok, path: Path):
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.backend_tokenizer.no_padding()         # sampling and scoring leave padding state behind
    tok.padding_side = "right"
    tok.save_pretrained(path)
    size = sum(f.stat().st_size for f in path.iterdir()) / 1e6
    log(f"saved {path} ({size:.1f} MB)")


if __name__ == "__main__":
    main()
