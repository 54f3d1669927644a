"""Where one PRM round's time goes: tokenise, forward, gather (and the softmax), per phase.

One round of a search: P problems (default 8) x C candidates (default 64); the candidates
of a problem share its question and, four by four, a history of D steps (default 3) and
differ in the newest step, as the children of a beam / REBASE / ETS round do. The step-tag
PRM scores them the way the search does:

    tokenise  render + tokenise every candidate      (MarkerPRM.encode_batch)
    forward   the model's own time                   (engine.score, or model.forward)
    gather    the backend's Python around the model  (logits_at minus forward: the padded
              batch, shared prefixes, reading the rows at the tags)
    softmax   the rows to scores                     (probabilities)

On the engine backend the previous round (the histories) is scored first, as in a search,
so only the newest steps are new. With `--against REV` the same round also runs on the
`rewards/` package of git revision REV (checked out into a temporary folder), interleaved
with the working tree's, the scores compared, and the ratio REV / now printed per phase;
e.g. `--against 126078a`, the last revision before the PRM's round was batched. With
`--surprise` the same round is read two ways instead, interleaved: the tag alone, and the
tag with the demo config's surprise readout (rewards/surprise.py), whose cost the ratio is.

    python scripts/bench_prm.py                                   # demo PRM, engine, 5 repeats
    python scripts/bench_prm.py --backend forward --repeats 3
    python scripts/bench_prm.py --against 126078a
    python scripts/bench_prm.py --surprise --depth 10          # the readout's cost, a deep history
    python scripts/bench_prm.py --model /models/math-shepherd-mistral-7b-prm --device cuda --dtype bfloat16

Medians of interleaved repeats with their [min, max] are printed; the threads are stated
(`--threads`, default 1: the machine is shared). Each repeat builds a fresh PRM (and engine).
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEMO_PRM = ROOT / "ets" / "demo" / "checkpoints" / "prm"
PHASES = ("tokenise", "forward", "gather", "softmax", "round")
ITEMS = ["towels", "socks", "pens", "apples", "books", "cups", "hats", "shoes"]


def workload(problems: int, candidates: int, depth: int, seed: int = 0):
    """(questions, previous round: the histories, this round: the candidates)."""
    rng = random.Random(seed)

    def step() -> str:
        n, price = rng.randint(2, 99), rng.randint(2, 99)
        return f"{n} {rng.choice(ITEMS)} at {price} dollars: {n} * {price} = {n * price}\n"

    questions, previous, current = [], [], []
    for _ in range(problems):
        a, b = rng.sample(ITEMS, 2)
        questions.append(f"Ivy buys {rng.randint(2, 9)} {a} at {rng.randint(2, 9) * 10} dollars each and "
                         f"{rng.randint(2, 9)} {b} at {rng.randint(2, 9) * 7} dollars each. "
                         "How much does she spend in total?")
        histories = [[step() for _ in range(depth)] for _ in range(max(1, candidates // 4))]
        previous.append(histories)
        current.append([histories[c * len(histories) // candidates] + [step()] for c in range(candidates)])
    return questions, previous, current


def reference_package(rev: str) -> str:
    """`rewards/` of git revision `rev`, importable as `rewards_<rev>`; returns that name."""
    name = "rewards_" + re.sub(r"\W", "_", rev)
    folder = Path(tempfile.mkdtemp(prefix="bench_prm_")) / name
    folder.mkdir()
    files = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", rev, "rewards/"],
                           check=True, capture_output=True, text=True).stdout.split()
    for path in files:
        if not path.endswith(".py"):
            continue
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
                              check=True, capture_output=True, text=True).stdout
        # its own modules, by their name then (`rewards`) or now (`ets.rewards`)
        text = re.sub(r"\b(from|import) (?:ets\.)?rewards\b", rf"\1 {name}", text)
        (folder / Path(path).name).write_text(text)
    sys.path.insert(0, str(folder.parent))
    return name


def make_prm(package: str, model, tok, backend: str, kv_budget_tokens: int, surprise=None):
    step_tag = importlib.import_module(f"{package}.step_tag")
    options = step_tag.StepTagOptions(backend=backend, **({"surprise": surprise} if surprise else {}))
    if backend == "engine":
        from ets.engine import Engine

        engine = Engine.from_pretrained(model, kv_budget_tokens=kv_budget_tokens, tokenizer=tok)
        return step_tag.StepTagPRM.from_model(model, tok, options, engine=engine)
    return step_tag.StepTagPRM.from_model(model, tok, options)


class Timed:
    """Wraps `obj.name` so that the seconds spent in it add up in `seconds`."""

    def __init__(self, obj, name: str):
        self.seconds = 0.0
        inner = getattr(obj, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        setattr(obj, name, timed)


def one_round(prm, questions, previous, current, backend: str):
    """(seconds per phase, scores) of one round, the previous one scored first."""
    if backend == "engine":
        prm.score(questions, previous)
        forward = Timed(prm.backend.engine, "score")
    else:
        forward = Timed(prm.backend.model, "forward")
    items = [(q, steps) for q, trajs in zip(questions, current) for steps in trajs]
    t0 = time.perf_counter()
    if hasattr(prm, "encode_batch"):
        encoded = prm.encode_batch(items)
    else:
        encoded = [prm.encode(q, steps) for q, steps in items]
    t1 = time.perf_counter()
    rows = prm.backend.logits_at([ids for ids, _ in encoded], [pos for _, pos in encoded])
    t2 = time.perf_counter()
    if hasattr(prm, "read"):        # the reading of each trajectory's rows (the readout's too)
        scores = [prm.read(r, len(steps), ids, pos) for r, (_, steps), (ids, pos) in zip(rows, items, encoded)]
    else:
        scores = [prm.probabilities(r) for r in rows]
    t3 = time.perf_counter()
    times = {"tokenise": t1 - t0, "forward": forward.seconds, "gather": t2 - t1 - forward.seconds,
             "softmax": t3 - t2, "round": t3 - t0}
    return times, scores


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(DEMO_PRM), help="a step-tag PRM (HF folder) or tiny:<arch>")
    p.add_argument("--backend", choices=("engine", "forward"), default="engine")
    p.add_argument("--problems", type=int, default=8)
    p.add_argument("--candidates", type=int, default=64, help="per problem")
    p.add_argument("--depth", type=int, default=3, help="history steps before the newest")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--against", metavar="REV", help="also run rewards/ of this git revision, interleaved")
    p.add_argument("--surprise", action="store_true",
                   help="read the round with the tag alone and with the demo config's surprise readout, interleaved")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--kv-budget-tokens", type=int, default=65536)
    args = p.parse_args(argv)

    import torch

    from ets.models.load import load_causal_lm

    torch.set_num_threads(args.threads)
    model, tok = load_causal_lm(args.model, device=args.device, dtype=args.dtype)
    questions, previous, current = workload(args.problems, args.candidates, args.depth)
    packages = {"now": ("ets.rewards", None)}
    if args.against:
        packages[args.against] = (reference_package(args.against), None)
    elif args.surprise:
        from ets.app.demo import demo_surprise

        packages = {"tag": ("ets.rewards", None), "surprise": ("ets.rewards", demo_surprise())}
    print(f"model {args.model} | backend {args.backend} | {args.problems} problems x {args.candidates} candidates, "
          f"history {args.depth} steps | threads {torch.get_num_threads()} | "
          f"TOKENIZERS_PARALLELISM={os.environ.get('TOKENIZERS_PARALLELISM', '(unset)')} | {args.repeats} repeats")

    times: dict[str, list[dict[str, float]]] = {k: [] for k in packages}
    worst = 0.0
    for r in range(args.repeats):
        order = list(packages) if r % 2 == 0 else list(packages)[::-1]     # interleaved, alternating
        scores = {}
        for key in order:
            package, surprise = packages[key]
            prm = make_prm(package, model, tok, args.backend, args.kv_budget_tokens, surprise)
            t, scores[key] = one_round(prm, questions, previous, current, args.backend)
            times[key].append(t)
        if len(scores) == 2 and not args.surprise:       # two readings differ by design
            a, b = scores.values()
            worst = max([worst] + [abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)])

    tokens = sum(len(ids) for ids, _ in make_prm("ets.rewards", model, tok, "forward", 0).encode_batch(
        [(q, s) for q, trajs in zip(questions, current) for s in trajs]))
    print(f"{sum(map(len, current))} candidates, {tokens} tokens in all")
    print(f"{'phase':10s}" + "".join(f"{k:>26s}" for k in packages) + ("   ratio" if len(packages) == 2 else ""))
    for phase in PHASES:
        line, medians = f"{phase:10s}", []
        for key in packages:
            xs = [t[phase] * 1e3 for t in times[key]]
            medians.append(statistics.median(xs))
            line += f"{medians[-1]:9.1f} ms [{min(xs):6.1f},{max(xs):7.1f}]"
        if len(medians) == 2:
            line += f"   {medians[1] / medians[0]:5.2f}x" if medians[0] > 0 else "      -"
        print(line)
    if args.against:
        print(f"scores: max |{args.against} - now| = {worst:.2e}")


if __name__ == "__main__":
    main()
