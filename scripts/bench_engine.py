"""Benchmark: the engine's speed, against plain `transformers` and the model's own floor.

Two suites, run in one process on one model object (other load on a shared machine then
hits every backend alike): every measurement is repeated `--repeats` times, the backends
*interleaved* within each repeat, and the median and spread (min-max) are printed. Only
ratios inside one run mean anything on a shared machine.

tree     Several problems searched at once, as the controller does: every round, each
         problem's frontier nodes get children (width W in all), one batched `expand`
         call per round for all problems; each problem keeps its `beams` best children (a
         fixed pseudo-random score, the same for both backends) and gives each W / beams
         children. The engine (ets/policy/engine.py) against plain generate (ets/policy/hf.py).
scaling  Decode tokens/s of B sequences (1..512) over a context of `--context` tokens, for
         `--decode` steps: B distinct prompts, and B samples of one prompt (a shared prefix),
         against the model's own floor (one forward of the same batch over a 1-token
         context, no cache, on the first engine's linears) and a transformers decode loop (DynamicCache, same batch); and
         the bound a decode of distinct contexts can reach here, the floor's step plus
         streaming every context's K and V once at this machine's rate (a plain sum over
         as many bytes): where that bound is under a third of the floor (a small model's
         K/V outweigh its matmuls), no engine meets that bar on this machine. The last
         column is the engine's own host work a decode step (its scheduler's plan and
         booking and the runner's metadata: HOST_PHASES in ets/engine/engine.py; beyond what
         a call of one forward takes, so a call's first planning and its finishing do not
         count) and its share of the wall: on a GPU, the part of a step that no faster
         kernel shortens. Every other engine's host work follows the table on a line of
         its own, with its distinct contexts' tok/s against the first engine's, repeat by
         repeat.
graphs   (CUDA only) The model's floor as above, eager against replayed from a CUDA graph:
         the graph runs the same kernels with no Python between them and one launch for
         all, so graphed / eager says how much of an eager forward is host overhead on this
         device, what a graph-captured engine step could win back. A suite of its own, so that a
         capture that fails (a host sync inside the model's code) costs no other figure.

    python scripts/bench_engine.py                          # both suites, demo policy, 1 and 2 threads
    python scripts/bench_engine.py --suite scaling --batches 1,32,128,512 --threads 1
    python scripts/bench_engine.py --model qwen1.5b --device cuda --dtype bfloat16   # random init, no download
    python scripts/bench_engine.py --kv-dtype float32,bfloat16   # also an engine storing K/V in bfloat16
    python scripts/bench_engine.py --cascade on,off              # also an engine without the cascade (cascade.py)
    python scripts/bench_engine.py --compile off,on              # also an engine whose forward is compiled (compiled.py)
    python scripts/bench_engine.py --prepack on,off              # also an engine on torch's own linears (linears.py)
    python scripts/bench_engine.py --advance on,off              # also an engine that plans every decode step (decode_run.py)
    python scripts/bench_engine.py --suite tree --profile 8      # then where the engine's op time went: its 8 costliest ops
    python scripts/bench_engine.py --suite graphs --model qwen1.5b --device cuda --dtype bfloat16

The last line is `speedup: X.XX` (tree suite, engine / hf, median, the first thread count).
"""

from __future__ import annotations

import os

# Passive OpenMP waiting is the shipped setting (the CLI sets it: ets/app/cli.py); it is set
# here before torch loads OpenMP so that every figure below is taken under it, unless the
# environment says otherwise (GOMP_SPINCOUNT, a spin before sleeping, overrides it). The
# header prints both. See --threads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import NamedTuple  # noqa: E402

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, DynamicCache  # noqa: E402

from ets.config import PolicyConfig, SearchConfig  # noqa: E402
from ets.engine import Engine, freeze_loaded  # noqa: E402
from ets.engine.engine import HOST_PHASES  # noqa: E402
from ets.models.tiny import build_tokenizer, tiny_config  # noqa: E402
from ets.policy.base import ExpandRequest  # noqa: E402
from ets.policy.engine import EnginePolicy  # noqa: E402
from ets.policy.hf import HFPolicy  # noqa: E402

DEMO_POLICY = Path(__file__).resolve().parents[1] / "ets" / "demo" / "checkpoints" / "policy"


def build_model(name: str, device: str, dtype: str, seed: int = 0):
    """`demo` (the bundled policy), a model folder (e.g. a converted SmolLM2-135M, see
    tests/real_model.py), `qwen1.5b` (random init, Qwen2.5-1.5B's shapes, built from a
    config: nothing downloaded) or `tiny:<arch>` (a small random model)."""
    folder = DEMO_POLICY if name == "demo" else Path(name)
    torch.manual_seed(seed)
    if folder.is_dir():
        from ets.models.load import load_causal_lm

        model, tok = load_causal_lm(str(folder), device, dtype, seed=seed)
        return model.eval(), tok
    tok = build_tokenizer()
    if name == "qwen1.5b":
        from transformers import Qwen2Config

        config = Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                             num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                             rope_theta=1000000.0, tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    else:
        arch = name.split(":", 1)[1] if ":" in name else "llama"
        config = tiny_config(arch, vocab_size=len(tok), hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                             num_attention_heads=4, num_key_value_heads=2, bos_token_id=tok.bos_token_id,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    return model.eval(), tok


def cpu_name() -> str:
    """The CPU's model and the vector instructions torch uses (figures differ by machine:
    an AVX2 EPYC ran both backends ~2x slower than an AVX-512 CPU)."""
    name = ""
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform

        name = platform.processor()
    return f"{name or 'CPU'}, {torch.backends.cpu.get_cpu_capability()}"


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def summary(values: list[float]) -> str:
    """median [min-max]"""
    med = statistics.median(values)
    return f"{med:,.0f} [{min(values):,.0f}-{max(values):,.0f}]" if med >= 100 else \
        f"{med:.2f} [{min(values):.2f}-{max(values):.2f}]"


def unique_tokens(paths: list[list[int]]) -> int:
    """Tokens of the union of `paths` (shared prefixes counted once): a trie's size."""
    trie: dict = {}
    count = 0
    for path in paths:
        node = trie
        for t in path:
            if t not in node:
                node[t] = {}
                count += 1
            node = node[t]
    return count


def run(policy, prompts: list[list[int]], args) -> dict:
    """The tree workload on `policy`; returns tokens, seconds and KV figures."""
    # frontier[p]: (handle, path) of the nodes to expand; the roots hold no handle.
    frontier = {p: [(None, prompts[p])] for p in range(len(prompts))}
    alloc = {p: [args.width] for p in frontier}
    generated, live_peak, locked_peak = 0, 0, 0
    before = policy.stats()
    start = time.perf_counter()
    for depth in range(args.steps):
        owners = [p for p in frontier for _ in frontier[p]]
        requests = [ExpandRequest((p, i), path, n) for p in frontier
                    for i, ((_, path), n) in enumerate(zip(frontier[p], alloc[p]))]
        steps = policy.expand(requests)
        # The children lock the parents' paths now: the parents' own handles can go.
        policy.release([h for p in frontier for h, _ in frontier[p]])
        children: dict[int, list] = {p: [] for p in frontier}
        for p, req, req_steps in zip(owners, requests, steps):
            for step in req_steps:
                generated += len(step.token_ids)
                children[p].append((step.handle, req.token_ids + step.token_ids))
        # The KV figures are the benchmark's own bookkeeping, not the backend's work: off
        # the clock (unique_tokens walks every live path in Python, ~8% of the engine's time).
        paused = time.perf_counter()
        live = [path for kids in children.values() for _, path in kids]
        live_peak = max(live_peak, unique_tokens(live))
        locked_peak = max(locked_peak, policy.stats().get("locked_kv_tokens", 0))
        start += time.perf_counter() - paused
        # Keep the `beams` best children by a score both backends agree on (a hash of depth
        # and rank, not of the tokens: the workload's shape must not depend on the samples).
        for p, kids in children.items():
            order = sorted(range(len(kids)), key=lambda i: zlib.crc32(f"{p}/{depth}/{i}".encode()))
            keep = sorted(order[: args.beams])
            policy.release([kids[i][0] for i in range(len(kids)) if i not in keep])
            frontier[p] = [kids[i] for i in keep]
            alloc[p] = [args.width // args.beams] * args.beams
    policy.release([h for p in frontier for h, _ in frontier[p]])
    seconds = time.perf_counter() - start
    return {"tokens": generated, "seconds": seconds, "tok_s": generated / seconds,
            "live_unique_peak": live_peak, "locked_peak": locked_peak, "stats": _delta(before, policy.stats())}


def _delta(before: dict, after: dict) -> dict:
    """Counters of one run (peaks and gauges as they are at the end)."""
    counters = ("computed_tokens", "generated_tokens", "cache_hit_tokens", "evicted_tokens", "preempted")
    return {k: v - before.get(k, 0) if k in counters else v for k, v in after.items()}



# ----------------------------------------------------------------------------- scaling
def host_seconds(stats: dict) -> float:
    """The engine's own host work in these `Engine.stats()` (its HOST_PHASES' seconds)."""
    return sum(stats[f"{phase}_seconds"] for phase in HOST_PHASES)


def scaling_cell(kind: str, model, engine: Engine | None, prompts: list[list[int]], decode: int, device,
                 host: list | None = None) -> float:
    """Decode tokens/s of one cell: `kind` is engine (the prompts as given) or floor / hf.
    An engine cell appends its host work a decode step to `host` when given: milliseconds,
    and their share of the wall (a call's own work, its first forward's planning and the
    sequences' finishing, left out: what a call of one forward takes)."""
    n = len(prompts)
    if kind == "engine":
        engine.evict()
        # Prefill outside the timing: the first call caches every prompt but its last token.
        engine.generate(prompts, max_new_tokens=1, temperature=0, ignore_eos=True)
        fixed = 0.0
        if host is not None:  # a call of one forward: the same first forward, the same finishing
            engine.reset_stats()
            engine.generate(prompts, max_new_tokens=1, temperature=0, ignore_eos=True)
            fixed = host_seconds(engine.stats())
        sync(device)
        engine.reset_stats()
        start = time.perf_counter()
        # decode + 1 forwards of one new token per sequence (the first reads the prompt's last)
        engine.generate(prompts, max_new_tokens=decode + 1, temperature=0, ignore_eos=True)
        sync(device)
        wall = time.perf_counter() - start
        if host is not None:
            # a difference of two calls' clocks: at a fraction of a millisecond, noise can
            # make it negative; it is at least 0
            per_step = max(0.0, host_seconds(engine.stats()) - fixed) / decode
            host.append((1000 * per_step, per_step * (decode + 1) / wall))
        return n * (decode + 1) / wall
    if kind == "floor":  # the same batch over a 1-token context: the model's matmuls alone
        ids = torch.tensor([p[-1:] for p in prompts], device=device)
        # on the engine's linears (linears.py) when it has its own: the floor is the same arithmetic
        linears = engine.linears if engine is not None else None
        with torch.inference_mode(), (linears.routed() if linears is not None else contextlib.nullcontext()):
            sync(device)
            start = time.perf_counter()
            for _ in range(decode + 1):
                model(input_ids=ids, use_cache=False, logits_to_keep=1)
            sync(device)
        return n * (decode + 1) / (time.perf_counter() - start)
    if kind == "kvread":  # the K/V reads alone: what distinct contexts must stream per step
        # float32 words: the bytes of the engine's K/V (whatever its dtype), read at the stream rate
        per_token = engine.pool.bytes_per_token // 4
        ctx = len(prompts[0])
        buf = torch.ones(n * (ctx + decode + 1) * per_token, device=device)
        with torch.inference_mode():
            sync(device)
            start = time.perf_counter()
            for step in range(decode + 1):
                buf[:n * (ctx + step) * per_token].sum()
            sync(device)
        return n * (decode + 1) / (time.perf_counter() - start)
    # hf: transformers' own decode loop over the same contexts (a DynamicCache, greedy)
    ids = torch.tensor(prompts, device=device)
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        out = model(input_ids=ids[:, :-1], past_key_values=cache, use_cache=True, logits_to_keep=1)
        nxt = ids[:, -1:]
        sync(device)
        start = time.perf_counter()
        for _ in range(decode + 1):
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True, logits_to_keep=1)
            nxt = out.logits[:, -1:].argmax(-1)
        sync(device)
    return n * (decode + 1) / (time.perf_counter() - start)


# ---------------------------------------------------------------------------- graphs
def floor_graph(model, ids: torch.Tensor):
    """The floor's forward (`ids`: one token per sequence) captured in a CUDA graph, after a
    warm-up on a side stream (as capture wants); replaying it reruns the same kernels on
    the same memory."""
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(input_ids=ids, use_cache=False, logits_to_keep=1)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(input_ids=ids, use_cache=False, logits_to_keep=1)
    return graph


def graphs(model, tok, args) -> list[str]:
    """Tokens/s of the floor (B sequences, a 1-token context) eager and from a CUDA graph:
    medians [min-max] of interleaved repeats, and their ratio."""
    gen = torch.Generator().manual_seed(2)
    vocab = min(len(tok), model.config.vocab_size)
    batches = [int(b) for b in args.batches.split(",")]
    steps = args.decode + 1
    prompts = [torch.randint(3, vocab, (1,), generator=gen).tolist() for _ in range(max(batches))]
    captured = {b: floor_graph(model, torch.tensor(prompts[:b], device=args.device)) for b in batches}
    cells: dict[tuple, list[float]] = {}
    for _ in range(args.repeats):
        for b in batches:
            cells.setdefault(("eager", b), []).append(scaling_cell("floor", model, None, prompts[:b], args.decode, args.device))
            sync(args.device)
            start = time.perf_counter()
            for _ in range(steps):
                captured[b].replay()
            sync(args.device)
            cells.setdefault(("graphed", b), []).append(b * steps / (time.perf_counter() - start))
            # as it goes: a run stopped at a time limit (scripts/gpu_check.sh) still leaves these
            print(f"  graphs, {b} sequences: eager {cells[('eager', b)][-1]:,.0f} tok/s, CUDA graph "
                  f"{cells[('graphed', b)][-1]:,.0f} tok/s", flush=True)
    lines = [f"graphs: the model floor (a 1-token context), tokens/s eager and from a CUDA graph, {steps} forwards; "
             f"median [min-max] of {args.repeats} interleaved repeats",
             "| sequences | eager | CUDA graph | graph / eager | eager ms a forward | graph ms a forward |",
             "|---|---|---|---|---|---|"]
    for b in batches:
        eager, graphed = statistics.median(cells[("eager", b)]), statistics.median(cells[("graphed", b)])
        lines.append(f"| {b} | {summary(cells[('eager', b)])} | {summary(cells[('graphed', b)])} | "
                     f"{graphed / eager:.2f} | {1e3 * b / eager:.2f} | {1e3 * b / graphed:.2f} |")
    return lines


class Variant(NamedTuple):
    """One engine measured: how it stores K/V (None: the model's dtype), whether decode
    sequences with siblings read their shared prefix once (the cascade) or plainly, and
    whether its forward is compiled (`compile`: on, off or auto), its linears prepacked
    for oneDNN (`prepack`: on, off or auto), and a decode forward of the last one's
    sequences moves its metadata on or is planned afresh (`advance`)."""
    kv_dtype: str | None
    cascade: bool
    compile: str = "auto"
    prepack: str = "auto"
    advance: bool = True

    def engine(self, model, tok, **kw) -> Engine:
        return Engine(model, tok, kv_dtype=self.kv_dtype, cascade=self.cascade, compile=self.compile,
                      prepack=self.prepack, advance=self.advance, **kw)


def variants(args) -> list[Variant]:
    """The engines to measure: every KV dtype asked for, each with every cascade, compile,
    prepack and advance setting."""
    vs = [None] if not args.kv_dtype else args.kv_dtype.split(",")
    cascades = [c == "on" for c in args.cascade.split(",")]  # checked in main
    return [Variant(v, c, comp, pack, adv == "on") for v in vs for c in cascades for comp in args.compile.split(",")
            for pack in args.prepack.split(",") for adv in args.advance.split(",")]


def engine_name(v: Variant, all_variants: list[Variant]) -> str:
    """`engine` for the first variant; the others by what sets them apart from it."""
    first = all_variants[0]
    tags = ([f"KV {v.kv_dtype}"] if v.kv_dtype != first.kv_dtype else []) + \
           (["no cascade" if not v.cascade else "cascade"] if v.cascade != first.cascade else []) + \
           ([f"compile {v.compile}"] if v.compile != first.compile else []) + \
           ([f"prepack {v.prepack}"] if v.prepack != first.prepack else []) + \
           ([f"advance {'on' if v.advance else 'off'}"] if v.advance != first.advance else [])
    return "engine" if not tags else f"engine[{', '.join(tags)}]"


def scaling(model, tok, args) -> list[str]:
    """The batch-scaling table: medians [min-max] of interleaved repeats (one pair of engine
    columns per KV dtype asked for, the first being `engine`)."""
    gen = torch.Generator().manual_seed(2)
    vocab = min(len(tok), model.config.vocab_size)
    batches = [int(b) for b in args.batches.split(",")]
    biggest = max(batches)
    pool = biggest * (args.context + args.decode + 4) + 64
    vs = variants(args)
    engines = {v: v.engine(model, tok, kv_budget_tokens=pool, max_batch_tokens=max(8192, biggest * 2))
               for v in vs}
    distinct = [torch.randint(3, vocab, (args.context,), generator=gen).tolist() for _ in range(biggest)]
    kinds = [(kind, v) for v in vs for kind in ("distinct", "shared")]
    # the floor, and what distinct contexts must read per step on top of it (the first engine's K/V)
    kinds += [("floor", vs[0]), ("kvread", vs[0])] + ([("hf", None)] if args.hf_scaling else [])
    cells: dict[tuple, list[float]] = {}
    host: dict[tuple, list[tuple[float, float]]] = {}  # each engine's host work, distinct contexts, by (engine, batch)
    for v, engine in engines.items():  # warm-up (a compiled engine compiles here: its time is printed)
        start = time.perf_counter()
        scaling_cell("engine", model, engine, distinct[:2], 2, args.device)
        print(f"  scaling, {engine_name(v, vs)}: warm-up {time.perf_counter() - start:.1f} s"
              f"{skipped_graphs(engine.stats())}{compile_failed(engine.stats())}", flush=True)
    scaling_cell("floor", model, engines[vs[0]], distinct[:2], 2, args.device)
    for rep in range(args.repeats):
        for b in batches:
            for kind, v in kinds:
                prompts = [distinct[0]] * b if kind == "shared" else distinct[:b]
                how = "engine" if kind in ("distinct", "shared") else kind
                cells.setdefault((kind, v, b), []).append(
                    scaling_cell(how, model, engines.get(v), prompts, args.decode, args.device,
                                 host.setdefault((v, b), []) if kind == "distinct" else None))
                # as it goes: a run stopped at a time limit (scripts/gpu_check.sh) still leaves these
                name = f"{engine_name(v, vs)} {kind}" if kind in ("distinct", "shared") else kind
                print(f"  scaling, repeat {rep + 1}, {b} sequences, {name}: {cells[(kind, v, b)][-1]:,.0f} tok/s",
                      flush=True)
    for engine in engines.values():
        engine.check()
    head = {"distinct": "distinct contexts", "shared": "shared prefix", "floor": "model floor (1-token context, the engine's linears)",
            "kvread": "K/V reads alone (distinct contexts' bytes at the stream rate)",
            "hf": "transformers decode (DynamicCache)"}
    names = [f"{engine_name(v, vs)}, {head[k]}" if k in ("distinct", "shared") else head[k] for k, v in kinds]
    ratios = [f"{engine_name(v, vs)} {k} / floor" for v in vs for k in ("distinct", "shared")]
    # The bound a decode of distinct contexts can reach: the floor's step plus streaming every
    # context's K and V once (no other cost); when it is under a third of the floor, no engine
    # meets that bar on this machine and model, and engine / bound says how close this one is.
    ratios += ["bound / floor", "engine distinct / bound",
               "engine distinct: host ms a decode step (share of the wall)"]
    lines = [f"scaling: decode tokens/s, context {args.context} -> {args.context + args.decode + 1} tokens, "
             f"{args.decode + 1} forwards, K/V {engines[vs[0]].pool.bytes_per_token:,} bytes a "
             f"token; median [min-max] of {args.repeats} interleaved repeats",
             "| sequences | " + " | ".join(names + ratios) + " |",
             "|---" * (len(names) + len(ratios) + 1) + "|"]
    for b in batches:
        floor = statistics.median(cells[("floor", vs[0], b)])
        ratio_cells = [f"{statistics.median(cells[(k, v, b)]) / floor:.2f}" for v in vs for k in ("distinct", "shared")]
        bound = 1 / (1 / floor + 1 / statistics.median(cells[("kvread", vs[0], b)]))
        ratio_cells += [f"{bound / floor:.2f}", f"{statistics.median(cells[('distinct', vs[0], b)]) / bound:.2f}"]
        ms, share = (statistics.median(x) for x in zip(*host[(vs[0], b)]))
        ratio_cells.append(f"{ms:.1f} ({share:.0%})")
        lines.append(f"| {b} | " + " | ".join(summary(cells[(k, v, b)]) for k, v in kinds)
                     + " | " + " | ".join(ratio_cells) + " |")
    for v in vs[1:]:  # the other engines' host work, and their decode against the first's, repeat by repeat
        parts = []
        for b in batches:
            ms, share = (statistics.median(x) for x in zip(*host[(v, b)]))
            ratios = [a / f for a, f in zip(cells[("distinct", v, b)], cells[("distinct", vs[0], b)])]
            parts.append(f"{b}: {ms:.1f} ms ({share:.0%}), {statistics.median(ratios):.2f}x "
                         f"[{min(ratios):.2f}-{max(ratios):.2f}]")
        lines.append(f"{engine_name(v, vs)}, distinct contexts: host ms a decode step (share of the wall), tok/s "
                     f"against engine's, by sequences: " + "; ".join(parts) + compile_failed(engines[v].stats()))
    return lines


# ------------------------------------------------------------------------------ tree
def compile_failed(stats: dict) -> str:
    """", compile failed: eager from then on" where an engine under `compile=auto` fell back
    (its figures after that are eager ones)."""
    return ", compile failed: eager from then on (the log's warning says why)" if stats.get("compile_failed") else ""


def skipped_graphs(stats: dict) -> str:
    """", CUDA graphs skipped N times ..." where a compiled engine on CUDA ran graphs
    without the CUDA graphs it asked for (its figures are then plain compiled kernels')."""
    from ets.engine.compiled import CompiledModel

    skips = stats.get("cudagraph_skips", 0)
    return f", {CompiledModel.skips_note(skips)}" if skips else ""


def tree(model, tok, args) -> tuple[list[str], float]:
    gen = torch.Generator().manual_seed(1)
    # Byte tokens 32..126 (printable, no newline): the step delimiter is rare, so steps
    # mostly run to --step-tokens, and both backends see the same step lengths.
    prompts = [torch.randint(32, 127, (args.prompt_tokens,), generator=gen).tolist() for _ in range(args.problems)]
    search = SearchConfig(width=args.width, max_step_tokens=args.step_tokens, temperature=1.0, seed=0)
    policy_cfg = PolicyConfig(model="tiny:llama", kv_budget_tokens=args.kv_budget, device=args.device)
    vs = variants(args)
    backends: dict[str, object] = {}
    for v in vs:
        engine = v.engine(model, tok, kv_budget_tokens=args.kv_budget, max_batch_tokens=policy_cfg.max_batch_tokens)
        backends[engine_name(v, vs)] = EnginePolicy(engine, policy_cfg, search)
    if not args.no_hf:
        backends["hf"] = HFPolicy(model, tok, policy_cfg, search)
    warm = argparse.Namespace(**{**vars(args), "steps": 1, "problems": 1})
    for policy in backends.values():  # warm-up: first-call costs out of the timing
        run(policy, prompts[:1], warm)
    # compiled engines: the first full run compiles what the warm-up's shapes did not (a
    # graph per kind of forward), off the clock too; its figures are reported below
    for name, policy in backends.items():
        if isinstance(policy, EnginePolicy) and policy.engine.runner.compiled is not None:
            start = time.perf_counter()
            run(policy, prompts, args)
            policy.release_all()
            stats = policy.engine.stats()
            print(f"  tree, {name}: first run {time.perf_counter() - start:.1f} s, "
                  f"{stats['compiled_graphs']} graphs compiled so far, in {stats['compile_seconds']:.1f} s"
                  f"{skipped_graphs(stats)}{compile_failed(stats)}", flush=True)
    results: dict[str, list[dict]] = {name: [] for name in backends}
    for rep in range(args.repeats):
        for name, policy in backends.items():
            if isinstance(policy, EnginePolicy):
                policy.release_all()
                policy.engine.evict()  # every repeat starts from an empty cache
                policy.engine.reset_stats()
            results[name].append(run(policy, prompts, args))
            # as it goes: a run stopped at a time limit (scripts/gpu_check.sh) still leaves these
            print(f"  tree, repeat {rep + 1}, {name}: {results[name][-1]['tok_s']:,.0f} tok/s", flush=True)
    width = max(map(len, backends))
    lines = [f"tree: {args.problems} problems x width {args.width} ({args.beams} beams), {args.steps} steps of <= "
             f"{args.step_tokens} tokens, prompts {args.prompt_tokens} tokens; median [min-max] of {args.repeats} "
             "interleaved repeats"]
    for name, rs in results.items():
        lines.append(f"{name:{width}s}: {rs[-1]['tokens']} tokens/run, tok/s {summary([r['tok_s'] for r in rs])}")
    ratio = float("nan")
    if "hf" in results:
        for v in vs:
            name = engine_name(v, vs)
            ratios = [a["tok_s"] / b["tok_s"] for a, b in zip(results[name], results["hf"])]
            ratio = statistics.median(ratios) if v == vs[0] else ratio
            lines.append(f"ratio ({name} / hf), per repeat: median {statistics.median(ratios):.2f} "
                         f"[{min(ratios):.2f}-{max(ratios):.2f}]")
        lines.append(f"hf KV: peak resident {results['hf'][-1]['stats']['peak_kv_tokens']} tokens (no sharing)")
    for v in vs:
        name = engine_name(v, vs)
        backends[name].engine.check()
        e = results[name][-1]
        est = e["stats"]
        lines.append(f"{name} KV: peak live {est['peak_live_kv_tokens']} tokens (locked paths + running samples), "
                     f"peak resident {est['peak_kv_tokens']} (pool {est['pool_kv_tokens']}, "
                     f"{est['pool_kv_bytes'] / 2**20:.0f} MiB); locked after a round at most {e['locked_peak']} vs "
                     f"{e['live_unique_peak']} unique tokens of the live paths (a handle does not hold its path's "
                     "last, uncomputed token)")
        lines.append(f"{name} work: computed {est['computed_tokens']} tokens, cache hits {est['cache_hit_tokens']}, "
                     f"evicted {est['evicted_tokens']}, preempted {est['preempted']}")
        shares = [host_seconds(r["stats"]) for r in results[name]]
        lines.append(f"{name} host work (plan + prepare + book): {1000 * statistics.median(shares) / est['steps']:.1f} "
                     f"ms a step over {est['steps']} steps, "
                     f"{statistics.median(h / r['seconds'] for h, r in zip(shares, results[name])):.0%} of the wall")
        if est["compiled_graphs"]:
            lines.append(f"{name} compiled: {est['compiled_graphs']} graphs over every run, in "
                         f"{est['compile_seconds']:.1f} s (the forwards that compiled them){skipped_graphs(est)}"
                         f"{compile_failed(est)}")
    if args.profile:
        lines += profile_lines(backends[engine_name(vs[0], vs)], prompts, args)
    # compiled against eager, prepacked against torch's linears, advancing against planning (or back), repeat by repeat
    for v in [v for v in vs if (v.compile, v.prepack, v.advance) != (vs[0].compile, vs[0].prepack, vs[0].advance)]:
        name, first = engine_name(v, vs), engine_name(vs[0], vs)
        ratios = [a["tok_s"] / b["tok_s"] for a, b in zip(results[name], results[first])]
        lines.append(f"ratio ({name} / {first}), per repeat: median {statistics.median(ratios):.2f} "
                     f"[{min(ratios):.2f}-{max(ratios):.2f}]")
    return lines, ratio


def profile_lines(policy, prompts: list[list[int]], args) -> list[str]:
    """One more run of the tree workload on `policy` under torch's profiler: the ops that
    took most of its op time (self time, all calls of an op together), and the share of
    the run's wall that no op accounts for (Python, the interpreter between ops)."""
    from torch.profiler import ProfilerActivity, profile

    policy.release_all()
    policy.engine.evict()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        wall = run(policy, prompts, args)["seconds"]
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in ops) / 1e6
    shares = ", ".join(f"{e.key} {e.self_cpu_time_total / 1e6 / total:.0%}" for e in ops[: args.profile])
    return [f"profile (one more run, under torch's profiler): op time {total:.2f} s of {wall:.2f} s wall; "
            f"the ops' self time: {shares}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="tree,scaling", help="tree, scaling, graphs (CUDA only), comma-separated")
    ap.add_argument("--model", default="demo", help="demo | a model folder | qwen1.5b | tiny:<arch>")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--kv-dtype", default=None, help="the engine's KV storage: float32, bfloat16, float16 "
                    "(default: the model's dtype); several, comma-separated, measure one engine each in the "
                    "same run (the first is `engine`, whose ratio ends the report)")
    ap.add_argument("--cascade", default="on", help="on, off or on,off: decode sequences with siblings "
                    "read their shared prefix once (on) or attend their whole context plainly (off); both "
                    "measure one engine each in the same run")
    ap.add_argument("--compile", default="auto", help="auto, on, off, or several comma-separated: the "
                    "engine's forward compiled (on), eager (off) or as auto picks on the device; several "
                    "measure one engine each in the same run")
    ap.add_argument("--prepack", default="auto", help="auto, on, off, or several comma-separated: the "
                    "engine's linears on oneDNN prepacked weights (on; the CPU), torch's own (off) or as auto "
                    "picks; several measure one engine each in the same run")
    ap.add_argument("--advance", default="on", help="on, off or on,off: decode steps of the same "
                    "sequences run as a decode run, moving the last step's metadata on (on), or are planned "
                    "afresh (off); both measure one engine each in the same run (the host work a step differs)")
    ap.add_argument("--threads", default="1,2", help="torch threads to measure, comma-separated (CPU)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved repeats; medians are reported")
    ap.add_argument("--quick", action="store_true", help="a small, fast version of every suite (a smoke run)")
    ap.add_argument("--out", default=None, help="also append the report to this file")
    g = ap.add_argument_group("tree")
    g.add_argument("--problems", type=int, default=8)
    g.add_argument("--width", type=int, default=16)
    g.add_argument("--beams", type=int, default=4)
    g.add_argument("--steps", type=int, default=6)
    g.add_argument("--step-tokens", type=int, default=32)
    g.add_argument("--prompt-tokens", type=int, default=100)
    g.add_argument("--kv-budget", type=int, default=65536)
    g.add_argument("--no-hf", action="store_true", help="skip plain generate in the tree suite")
    g.add_argument("--profile", type=int, default=0, metavar="N",
                   help="then profile one more run of the first engine: its N most costly ops' shares of op time")
    g = ap.add_argument_group("scaling")
    g.add_argument("--batches", default="1,8,32,128,512")
    g.add_argument("--context", type=int, default=140)
    g.add_argument("--decode", type=int, default=15)
    g.add_argument("--hf-scaling", action="store_true", help="add a transformers decode-loop column")
    args = ap.parse_args()
    if not set(args.cascade.split(",")) <= {"on", "off"}:
        ap.error(f"--cascade {args.cascade!r}: use on, off or on,off")
    if not set(args.compile.split(",")) <= {"auto", "on", "off"}:
        ap.error(f"--compile {args.compile!r}: use auto, on, off, comma-separated")
    if not set(args.prepack.split(",")) <= {"auto", "on", "off"}:
        ap.error(f"--prepack {args.prepack!r}: use auto, on, off, comma-separated")
    if not set(args.advance.split(",")) <= {"on", "off"}:
        ap.error(f"--advance {args.advance!r}: use on, off or on,off")
    suites = args.suite.split(",")
    if not set(suites) <= {"tree", "scaling", "graphs"}:
        ap.error(f"--suite {args.suite!r}: use tree, scaling or graphs, comma-separated")
    if "graphs" in suites and torch.device(args.device).type != "cuda":
        ap.error(f"--suite graphs captures CUDA graphs: it needs --device cuda (got {args.device!r})")
    if args.quick:
        args.repeats, args.problems, args.steps, args.batches, args.decode = 2, 2, 2, "1,8,32", 4
    model, tok = build_model(args.model, args.device, args.dtype)
    freeze_loaded()  # as `ets run` does once its models are loaded (ets/engine/heap.py)
    report = [f"model {args.model} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params, "
              f"{args.dtype}; engine KV stored as {args.kv_dtype or args.dtype}, cascade {args.cascade}, compile {args.compile}, prepack {args.prepack}, advance {args.advance}) on {args.device} ({cpu_name()}); "
              f"torch {torch.__version__}; OMP_WAIT_POLICY="
              f"{os.environ.get('OMP_WAIT_POLICY')}, GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}; figures from one run (a shared machine: compare ratios only)"]
    first_ratio = float("nan")
    for i, threads in enumerate(int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        report.append(f"== {threads} thread(s) ==")
        if "tree" in suites:
            lines, ratio = tree(model, tok, args)
            report += lines
            first_ratio = ratio if i == 0 else first_ratio
        if "scaling" in suites:
            report += scaling(model, tok, args)
        if "graphs" in suites:
            report += graphs(model, tok, args)
    text = "\n".join(report)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")
    if "tree" in suites:
        print(f"speedup: {first_ratio:.2f}")


if __name__ == "__main__":
    main()
