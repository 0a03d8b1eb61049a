#!/usr/bin/env bash
# Regenerates tests/data/kld/: llama-perplexity's KL-divergence files and figures for
# tests/calib_test.cc (lumen perplexity --kl-divergence[-base] against llama.cpp's).
#
#   LLAMA_BIN=/work/peer/llama.cpp/build/bin LUMEN_SHARED=/work/shared tools/kld_goldens.sh
#
# Needs a native llama.cpp build (llama-perplexity, llama-quantize; c392e5094 for the
# committed files). Writes:
#   stories260K-c64.kld   llama-perplexity --kl-divergence-base on stories260K.gguf (f32) over
#                         the first 20000 bytes of War and Peace, -c 64, 4 chunks (124 rows)
#   stories260K-q4_k_m.txt  llama-perplexity --kl-divergence of llama-quantize's Q4_K_M of it
#                         against that file: "<statistic> <value>" lines
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BIN=${LLAMA_BIN:-/work/peer/llama.cpp/build/bin}
export LUMEN_SHARED=${LUMEN_SHARED:-$(pwd)/../shared}
out=tests/data/kld
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model="$LUMEN_SHARED/models/stories260K/stories260K.gguf"
head -c 20000 "$LUMEN_SHARED/corpus/war-and-peace.txt" > "$tmp/text.txt"
"$LLAMA_BIN/llama-perplexity" -m "$model" -f "$tmp/text.txt" -c 64 --chunks 4 \
    --kl-divergence-base "$out/stories260K-c64.kld" -t 2 > "$tmp/base.log" 2>&1
"$LLAMA_BIN/llama-quantize" "$model" "$tmp/q.gguf" q4_k_m 2 > "$tmp/q.log" 2>&1
"$LLAMA_BIN/llama-perplexity" -m "$tmp/q.gguf" --kl-divergence-base "$out/stories260K-c64.kld" \
    --kl-divergence -t 2 > "$tmp/kld.log" 2>&1
python3 - "$tmp/kld.log" > "$out/stories260K-q4_k_m.txt" <<'PY'
import re, sys
keys = {"Mean PPL(Q)": "ppl", "Mean PPL(base)": "ppl_base", "Mean    KLD": "kld_mean",
        "99.0%   KLD": "kld_99", "Median  KLD": "kld_median", "Maximum KLD": "kld_max",
        "RMS Δp": "dp_rms", "Same top p": "same_top"}
seen = set()
for line in open(sys.argv[1], encoding="utf-8"):
    for label, key in keys.items():
        if line.startswith(label) and key not in seen:
            seen.add(key)
            v = float(re.search(r":\s*(-?[0-9.]+)", line).group(1))
            if key in ("dp_rms", "same_top"): v /= 100  # printed in %
            print(key, repr(v))
PY
cat "$out/stories260K-q4_k_m.txt"
