"""The model's forward compiled (`Engine(compile=...)`, `policy.compile`).

An eager forward runs the model's `transformers` code op by op from Python: hundreds of
small kernels a step, each launched by the interpreter, so a small model's step is mostly
host time. Compiled, `torch.compile` traces that code once per shape into one graph and
inductor fuses its pointwise work (norms, rotary embeddings, activations) into a few
kernels; on CUDA the graph's pieces are replayed as CUDA graphs (no launch per kernel).

Paged attention stays outside the compiler: it is a custom op (`ets::paged_attention`)
whose inputs are this layer's query, key and value and whose output is the attention
output, while the forward's metadata (a `PackedBatch`: Python lists, groups and kept
buffers that change every step) reaches it beside the graph, set by `CompiledModel` for
the duration of each call. The graph is then the whole model, the op opaque within it
(the attention function `torch.compiler.disable`d instead breaks the graph at every
layer's attention: a 4-layer model compiled 10 graphs that way, each entered from
Python, against one). On CUDA the op is marked unsafe for CUDA graphs, so inductor
partitions the graph there: the pieces between the layers' attention are graphed,
attention runs eagerly between them.

Shapes: the packed row count changes every step. Marked dynamic (`DYNAMIC`), one graph
serves every row count: over the demo policy's tree benchmark, one graph in all; over any
run at most five (`CompiledModel.graphs`: logits of all rows or of some, each with the
final hidden states handed out or not, and hidden states), on CUDA twice that (below).
Static, a graph per padded row count (`bucket`) and per kept count. On CUDA, where a CUDA
graph is recorded per shape, forwards of up to CUDAGRAPH_MAX_ROWS rows (decode steps) are
padded to those few sizes, so that steps reuse a few recordings; larger ones run compiled
without CUDA graphs, unpadded, a second set of graphs. Padding rows are the runner's own
(copies of the last token, K/V to the pool's scratch slot, outputs dropped), so they
change no number of the real rows (invariant.py), and the compiled forward keeps the
engine's batch invariance on the CPU (tests/test_engine_compile.py).

A compiled forward that fails (tracing, compiling, recording or replaying its graphs: a
device with no compiler, an inductor error, a CUDA graph that cannot be captured) raises
`CompileFailed`. Under `compile="auto"` the runner then runs that forward again eagerly,
and every forward after it: what the failed one did before it raised (K/V written to the
pool, kept decode buffers moved on) is redone from the pool, which holds every computed
token. An error of the attention op itself is not a compile failure and is raised as it is.
"""

from __future__ import annotations

import time

import torch

from ets.engine import attention
from ets.engine.attention import PackedBatch
from ets.engine.hidden import final_norm, model_name

# the attention function's name in `transformers.AttentionInterface` while a compiled
# forward runs (the eager forward's is attention.ATTENTION_NAME)
ATTENTION_NAME = "ets_paged_op"

MODES = ("auto", "on", "off")

# The packed row count is a dynamic dimension of the graph (one graph for every count);
# False: a graph per padded count (`bucket`)
DYNAMIC = True

# torch.compile's backend for the forward (a test puts one that fails in its place)
BACKEND = "inductor"

# the graphs dynamo keeps for each compiled function, at least (CompiledModel)
RECOMPILE_LIMIT = 64

# The most rows of a forward replayed as CUDA graphs (vLLM's largest capture size by
# default). A larger forward (a long prefill, a PRM scoring many paths) is bound by its
# matmuls, not by kernel launches: it runs compiled without CUDA graphs and unpadded, where
# padding it would add up to half its compute and recording it a graph of its own per size.
CUDAGRAPH_MAX_ROWS = 512

_current: list["_Running"] = []  # the compiled forward running now (at most one)

# CUDA graphs must not capture the attention op: its metadata changes every step
_TAGS = (torch.Tag.cudagraph_unsafe,) if hasattr(torch.Tag, "cudagraph_unsafe") else ()


@torch.library.custom_op("ets::paged_attention", mutates_args=(), tags=_TAGS)
def paged_attention_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layer: int,
                       scaling: float | None, window: int | None) -> torch.Tensor:
    """attention.attend over the batch of the running compiled forward: writes this
    layer's new K/V into the pool (which the graph never reads) and returns [1, T, H, D]."""
    if not _current:
        raise RuntimeError(f"the {ATTENTION_NAME!r} attention op only runs inside a compiled ets.engine forward")
    running = _current[-1]
    try:
        return attention.attend(running.batch, layer, query, key, value, scaling, window).contiguous()
    except Exception as exc:  # an error of the attention, raised by an eager forward too
        running.raised = exc
        raise


@paged_attention_op.register_fake
def _(query, key, value, layer, scaling, window):
    return query.new_empty(query.shape[0], query.shape[2], query.shape[1], query.shape[3])


def compiled_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The `AttentionInterface` function of compiled forwards: the op, per layer."""
    attention.check_kwargs(kwargs)
    return paged_attention_op(query, key, value, module.layer_idx, scaling, kwargs.get("sliding_window")), None


def register() -> None:
    """Make `ATTENTION_NAME` known to `transformers` (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, compiled_attention)


def enabled(mode: str | bool, device: torch.device) -> bool:
    """Whether `compile` (auto | on | off, or a bool) compiles on `device`. auto: on CUDA
    only, where an eager step is mostly kernel launches. On the CPU a step's time is mostly
    its matmuls (which compiling leaves to the same kind of kernels) and attention (an op
    of ours, outside the graph), so the compile (seconds to minutes) pays only over a long
    run, if at all (docs/results.md, "Engine speed on the CPU"); and a compiled forward's
    logits differ from eager's in their last bits, so a sampled search's records differ."""
    if isinstance(mode, bool):
        return mode
    if mode not in MODES:
        raise ValueError(f"compile={mode!r}: use auto, on or off")
    return mode == "on" or (mode == "auto" and torch.device(device).type == "cuda")


def bucket(rows: int) -> int:
    """The padded row count of a forward of `rows` rows: the next of 1, 2, 3, 4, 6, 8, 12,
    16, 24, ... (powers of two and their halfway points), so at most 1.5x the rows, and a
    run of up to R rows meets at most 2 log2(R) sizes."""
    power = 1 << max(0, rows - 1).bit_length()  # the next power of two
    return power * 3 // 4 if power >= 4 and rows <= power * 3 // 4 else power


def cudagraph_options(device: torch.device) -> dict:
    """inductor options: on CUDA, mode="reduce-overhead"'s (CUDA graphs) with the graph
    partitioned at the attention op (which CUDA graphs must not capture); where this torch
    cannot partition so, and off CUDA, none (plain compiled kernels).

    Not inductor's `freezing` on the CPU, though it lays the linears' weights out for
    oneDNN as `linears.PackedLinears` does for an eager forward (each of SmolLM2-135M's
    projections about 1.5x faster at 16 rows than the plain matmul a compiled forward
    runs): in torch 2.13 a frozen graph keeps the model's weights and their laid-out copy
    alive in torch's caches after the engine is gone (tests/test_engine_compile.py), so a
    process building engine after engine would keep them all; and the whole tree
    benchmark was no faster for it (within the runs' spread)."""
    if torch.device(device).type != "cuda" or not _TAGS:
        return {}
    from torch._inductor import config, list_mode_options

    if not hasattr(config, "graph_partition"):
        return {}
    return {**list_mode_options("reduce-overhead"), "graph_partition": True}


def _logits(model, input_ids, position_ids, keep):
    return model(input_ids=input_ids, position_ids=position_ids, use_cache=False, logits_to_keep=keep).logits


def _hidden(model, input_ids, position_ids):
    return model.base_model(input_ids=input_ids, position_ids=position_ids, use_cache=False).last_hidden_state


# The same forwards, compiled for CUDA graphs: functions of their own, as dynamo keeps a
# function's graphs by its code object (the call inside is traced into the graph)
def _logits_graphed(model, input_ids, position_ids, keep):
    return _logits(model, input_ids, position_ids, keep)


def _hidden_graphed(model, input_ids, position_ids):
    return _hidden(model, input_ids, position_ids)


class CompileFailed(RuntimeError):
    """The compiled forward raised, not in the attention op (tracing, compiling, recording
    or replaying its graphs), maybe after some layers ran: the forward can run again
    eagerly once packed afresh, its kept decode buffers rebuilt from the pool
    (runner.ModelRunner). The cause is chained (`__cause__`)."""


class _Running:
    """The compiled forward running now: its batch, and what its attention op raised."""

    def __init__(self, batch: PackedBatch):
        self.batch, self.raised = batch, None


class CompiledModel:
    """The model's forward compiled: logits at kept rows, or final hidden states; and how
    many graphs its calls compiled (`graphs`), in how many seconds (`compile_seconds`:
    the calls that compiled, their run included); on CUDA, how many times inductor ran a
    graph without the CUDA graphs asked for (`cudagraph_skips`: a graph that cannot be
    recorded, e.g. one holding an op that CUDA graphs do not allow, runs as plain compiled
    kernels; `TORCH_LOGS=cudagraphs` logs why)."""

    def __init__(self, model, device: torch.device):
        register()
        _capture_final_states(model)
        # Every model compiled in a process adds its graphs to the same compiled functions
        # (`_logits`, `_hidden`, ...: dynamo keeps their graphs by code object, told apart by
        # guards), past dynamo's default of 8 when a process runs several models (a policy
        # and a PRM, each a few graphs); beyond the limit a forward would run eagerly.
        limit = torch._dynamo.config.recompile_limit
        torch._dynamo.config.recompile_limit = max(limit, RECOMPILE_LIMIT)
        self.model = model
        options = cudagraph_options(device)
        self.cudagraphs = bool(options)
        self._logits = torch.compile(_logits, backend=BACKEND, dynamic=DYNAMIC)
        self._hidden = torch.compile(_hidden, backend=BACKEND, dynamic=DYNAMIC)
        if self.cudagraphs:  # forwards of up to CUDAGRAPH_MAX_ROWS rows
            self._logits_graphed = torch.compile(_logits_graphed, backend=BACKEND, dynamic=DYNAMIC, options=options)
            self._hidden_graphed = torch.compile(_hidden_graphed, backend=BACKEND, dynamic=DYNAMIC, options=options)
        self.graphs = 0
        self.compile_seconds = 0.0
        self.cudagraph_skips = 0

    @staticmethod
    def skips_note(skips: int) -> str:
        """How `cudagraph_skips` is said to a user (`ets run`'s last line, the benchmarks)."""
        return (f"CUDA graphs skipped {skips} time{'' if skips == 1 else 's'}, those forwards ran as plain compiled "
                "kernels (TORCH_LOGS=cudagraphs says why)")

    def graphed(self, rows: int) -> bool:
        """Whether a forward of `rows` (padded) rows is replayed as CUDA graphs."""
        return self.cudagraphs and rows <= CUDAGRAPH_MAX_ROWS

    def rows(self, rows: int) -> int:
        """The rows a forward of `rows` rows runs: padded to a `bucket` where shapes must be
        few (static shapes; CUDA graphs, recorded per shape), else as it is."""
        return bucket(rows) if not DYNAMIC or self.graphed(rows) else rows

    def forward(self, batch: PackedBatch, input_ids, position_ids, keep: torch.Tensor | None,
                states: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the logits at rows `keep` [1, len(keep), V], or with `keep` None the final hidden
        states [1, T, hidden]; and with `states`, the final hidden states, else None)."""
        from torch._dynamo.utils import counters

        before, skips = counters["stats"]["unique_graphs"], counters["inductor"]["cudagraph_skips"]
        start = time.perf_counter()
        graphed = self.graphed(input_ids.shape[1])
        if graphed:
            torch.compiler.cudagraph_mark_step_begin()
        _capture.want = states and keep is not None  # a guard of the graph: one with, one without
        running = _Running(batch)
        _current.append(running)
        try:
            if keep is None:
                out = (self._hidden_graphed if graphed else self._hidden)(self.model, input_ids, position_ids)
                final = out if states else None
            else:
                out = (self._logits_graphed if graphed else self._logits)(self.model, input_ids, position_ids, keep)
                final = _capture.states
        except Exception as exc:
            if exc is running.raised:
                raise
            raise CompileFailed(_reason(exc)) from exc
        finally:
            _current.pop()
            _capture.want, _capture.states = False, None
        if states and final is None:  # as hidden.final_hidden says it in an eager forward
            raise ValueError(f"the model ({model_name(self.model)}) has no final norm to read its hidden states from")
        compiled = counters["stats"]["unique_graphs"] - before
        if compiled:
            self.graphs += compiled
            self.compile_seconds += time.perf_counter() - start
        if graphed:  # a CUDA graph's outputs are overwritten by its next replay
            self.cudagraph_skips += counters["inductor"]["cudagraph_skips"] - skips
            raw, out = out, out.clone()
            final = out if final is raw else (final.clone() if final is not None else None)
        return out, final


def _reason(exc: BaseException) -> str:
    """The innermost cause of a failed compile (dynamo wraps what inductor or a backend
    raised), as its type and its message's first line (theirs run to dozens of lines)."""
    seen = {id(exc)}
    while (inner := getattr(exc, "inner_exception", None) or exc.__cause__) is not None and id(inner) not in seen:
        exc = inner
        seen.add(id(exc))
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class _Capture:
    """What the final norm's hook keeps, in a compiled forward that wants it."""
    want = False
    states: torch.Tensor | None = None


_capture = _Capture()


def _keep_final_states(module, inputs, output) -> None:
    if _capture.want:
        _capture.states = output[0] if isinstance(output, tuple) else output


def _capture_final_states(model) -> None:
    """Hook `model`'s final norm (hidden.final_norm; once) so that a compiled forward can
    hand out its final hidden states: traced into the graph, its output an output of the
    graph when `_capture.want`. (Registered before any compiled forward of the model: a
    hook added after is not seen by graphs compiled before.)"""
    norm = final_norm(model)
    if norm is not None and _keep_final_states not in norm._forward_hooks.values():
        norm.register_forward_hook(_keep_final_states)
