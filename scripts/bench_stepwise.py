"""Benchmark: decoding step by step, as a search does, against one call for the same tokens.

A search decodes a step of every live path, stops each at the step delimiter, scores,
and decodes the next step: many short `expand` calls, each ending when its slowest
sequence ends its step. This measures what that costs against one `generate` call that
produces the very same tokens (greedy, EOS ignored, so both paths write identical
tokens: asserted), on a real model with its chat template:

    one call    engine.generate(prompts, max_new_tokens=T)
    step-wise   rounds of engine.expand(paths, stop=delimiter) until every path holds T
                new tokens; each round's paths locked, the last round's released
    in flight   each path's next step submitted (engine.submit) as soon as its last one
                ends, the others decoding on: the search loop's way (ets/loop/controller.py)
    hf          transformers' generate on the same batch (left-padded), for reference

Repeats are interleaved and the median and spread (min-max) printed; only ratios inside
one run mean anything on a shared machine. With `--profile` the step-wise run is profiled
once more (cProfile) and its top functions by own time printed.

    python scripts/bench_stepwise.py --model ~/.cache/ets-tests/smollm2-135m-instruct-0.1.2
    python scripts/bench_stepwise.py --model PATH --problems 20 --tokens 192 --delimiter "\\n" --profile
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI sets it (ets/app/cli.py)

import argparse  # noqa: E402
import cProfile  # noqa: E402
import json  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from ets.config import PolicyConfig  # noqa: E402
from ets.engine import Engine  # noqa: E402
from ets.models.load import load_causal_lm  # noqa: E402
from ets.policy.chat import prompt_format, render  # noqa: E402

DEMO_DATA = Path(__file__).resolve().parents[1] / "ets" / "demo" / "data" / "test.jsonl"


def prompts_of(tokenizer, model: str, data: Path, n: int) -> list[list[int]]:
    """The first n questions of a JSONL file as a search's roots: in the model's chat
    template when it has one (ets/policy/chat.py, a default PolicyConfig)."""
    config = PolicyConfig(model=model)
    fmt = prompt_format(tokenizer, config)
    questions = [json.loads(line)["question"] for line in data.read_text().splitlines()[:n]]
    return [render(tokenizer, config, fmt, q)[1] for q in questions]


def one_call(engine: Engine, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    engine.evict()
    return engine.generate(prompts, max_new_tokens=tokens, temperature=0.0, ignore_eos=True)


def stepwise(engine: Engine, prompts: list[list[int]], tokens: int, delimiter: str) -> tuple[list[list[int]], int]:
    """(each prompt's new tokens, rounds): expand every path one step a round."""
    engine.evict()
    new: list[list[int]] = [[] for _ in prompts]
    held: list[int] = []
    rounds = 0
    while any(len(t) < tokens for t in new):
        live = [i for i, t in enumerate(new) if len(t) < tokens]
        cap = max(tokens - len(new[i]) for i in live)
        conts = engine.expand([(prompts[i] + new[i], 1) for i in live], max_new_tokens=cap, temperature=0.0,
                              stop=[delimiter], ignore_eos=True)
        engine.release(held)
        held = []
        for i, (c,) in zip(live, conts):
            new[i].extend(c.token_ids[:tokens - len(new[i])])
            held.append(c.handle)
        rounds += 1
    engine.release(held)
    return new, rounds


def in_flight(engine: Engine, prompts: list[list[int]], tokens: int, delimiter: str) -> list[list[int]]:
    """Each path's next step submitted as soon as its last one ends (Engine.submit), as the
    search loop runs each problem's rounds: no path waits for another's step."""
    engine.evict()
    new: list[list[int]] = [[] for _ in prompts]
    held: dict[int, int] = {}

    def submit(i: int):
        return engine.submit([(prompts[i] + new[i], 1)], max_new_tokens=tokens - len(new[i]), temperature=0.0,
                             stop=[delimiter], ignore_eos=True)

    owner = {submit(i): i for i in range(len(prompts))}
    while owner:
        for ticket in engine.step():
            i = owner.pop(ticket)
            [[c]] = engine.collect(ticket)
            if i in held:
                engine.release([held[i]])
            held[i] = c.handle
            new[i].extend(c.token_ids[:tokens - len(new[i])])
            if len(new[i]) < tokens:
                owner[submit(i)] = i
    engine.release(list(held.values()))
    return new


def hf_generate(model, tokenizer, prompts: list[list[int]], tokens: int) -> None:
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                       do_sample=False, pad_token_id=pad)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model folder or hub name (a real model, with its tokenizer)")
    ap.add_argument("--data", type=Path, default=DEMO_DATA, help="JSONL with `question` (default: the demo's test set)")
    ap.add_argument("--problems", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=192, help="new tokens per problem")
    ap.add_argument("--delimiter", default="\n", help="where a step ends (escapes like \\n are read)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' generate")
    ap.add_argument("--profile", action="store_true", help="profile one more step-wise run")
    args = ap.parse_args()
    delimiter = args.delimiter.encode().decode("unicode_escape")
    torch.set_num_threads(args.threads)
    model, tokenizer = load_causal_lm(args.model)
    engine = Engine(model, tokenizer, kv_budget_tokens=1 << 16)
    prompts = prompts_of(tokenizer, args.model, args.data, args.problems)
    print(f"{args.model}: {model.config.num_hidden_layers} layers; {len(prompts)} prompts "
          f"({sum(map(len, prompts)):,} tokens), {args.tokens} new tokens each, step delimiter {delimiter!r}, "
          f"{args.threads} thread(s), {args.repeats} interleaved repeats")

    reference = one_call(engine, prompts, 1)  # warm-up
    times: dict[str, list[float]] = {"one call": [], "step-wise": [], "in flight": [],
                                     **({} if args.no_hf else {"hf generate": []})}
    rounds = 0
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        reference = one_call(engine, prompts, args.tokens)
        times["one call"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        steps, rounds = stepwise(engine, prompts, args.tokens, delimiter)
        times["step-wise"].append(time.perf_counter() - t0)
        assert steps == reference, "step-wise decoding wrote other tokens than the one call"
        t0 = time.perf_counter()
        flying = in_flight(engine, prompts, args.tokens, delimiter)
        times["in flight"].append(time.perf_counter() - t0)
        assert flying == reference, "decoding in flight wrote other tokens than the one call"
        if not args.no_hf:
            t0 = time.perf_counter()
            hf_generate(model, tokenizer, prompts, args.tokens)
            times["hf generate"].append(time.perf_counter() - t0)
    base = statistics.median(times["one call"])
    print(f"\nstep-wise: {rounds} rounds; the same {len(prompts) * args.tokens:,} tokens as the one call\n")
    print("| run | median s | min-max s | / one call |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.2f} | {min(ts):.2f}-{max(ts):.2f} | "
              f"{statistics.median(ts) / base:.2f}x |")
    for name in ("step-wise", "in flight"):
        ratios = [s / o for s, o in zip(times[name], times["one call"])]
        print(f"{name} / one call per repeat: {', '.join(f'{r:.2f}' for r in ratios)}")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        stepwise(engine, prompts, args.tokens, delimiter)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
