#!/usr/bin/env bash
# Prepares .gpu/ (git-ignored) with what an offline GPU machine lacks for scripts/gpu_check.sh,
# one with torch, transformers, scipy, sentence-transformers and Python 3.12 but no network.
#
#   .gpu/whl/               math-verify and its two pure-Python needs (the sweep grades with it)
#   .gpu/static-embedder/   the demo's ETS embedder (static:all-MiniLM-L6-v2), distilled here:
#                           that machine has neither the offline MiniLM nor model2vec
#
# Then copy the repository with .gpu/ to that machine and run `bash scripts/gpu_check.sh`.
set -eu
cd "$(dirname "$0")/.."
rm -rf .gpu
mkdir -p .gpu/whl
version() { python3 -c "import importlib.metadata as m; print(m.version('$1'))"; }
for pkg in math-verify latex2sympy2_extended antlr4-python3-runtime; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .gpu/whl "$pkg==$(version "$pkg")"
done
folder=$(python3 -c "from ets.lp.clustering import static_embedder; print(static_embedder('all-MiniLM-L6-v2'))")
cp -r "$folder" .gpu/static-embedder
du -sh .gpu/whl .gpu/static-embedder
