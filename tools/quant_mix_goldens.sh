#!/usr/bin/env bash
# Regenerates tests/data/quant/: what llama-quantize writes for small synthetic F16 models, for
# every mix, with and without an importance matrix (tests/quant_mix_test.cc compares
# `lumen quantize` with it, tensor by tensor: type and FNV-1a 64 of the bytes).
#
#   LLAMA_BIN=/work/peer/llama.cpp/build/bin LUMEN_SHARED=/work/shared tools/quant_mix_goldens.sh
#
# Needs a native llama.cpp build (llama-quantize, llama-imatrix; c392e5094 for the committed
# files) and build/lumen. Per model:
#   <name>.imatrix  llama-imatrix on the first 200 kB of War and Peace (-c 128, 8 chunks): an
#                   importance matrix in llama.cpp's own file format
#   <name>.txt      "# input <fnv of the F16 file>" then one line per (mix, imatrix, tensor):
#                   "<mix> <0|1> <tensor> <type> <fnv1a64 of its bytes>"
# and, for small mixture-of-experts models, only the importance matrix (tests/calib_test.cc:
# lumen imatrix's expert, router and shared-expert entries against llama-imatrix's):
#   <name>.imatrix  as above
# The F16 inputs are not committed: `lumen synth` makes them again (the input hash in the
# first line says whether it still makes the same bytes).
#
#   tools/quant_mix_goldens.sh moe     remakes only the mixture-of-experts importance matrices
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BIN=${LLAMA_BIN:-/work/peer/llama.cpp/build/bin}
LUMEN=${LUMEN:-build/lumen}
export LUMEN_SHARED=${LUMEN_SHARED:-$(pwd)/../shared}
out=tests/data/quant
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name | synth arguments (keep in step with tests/quant_mix_test.cc)
models=(
  "qwen2-h160|--preset tiny-qwen2 --hidden 160 --heads 5 --kv-heads 1 --ffn 256 --layers 8"
  "llama-h256|--preset tiny-llama --hidden 256 --heads 4 --kv-heads 2 --ffn 256 --layers 8"
)
mixes="q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q2_k_s q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m q6_k
       iq2_xxs iq2_xs iq2_s iq2_m iq1_s iq1_m iq3_xxs iq3_xs iq3_s iq3_m iq4_nl iq4_xs"

# name | synth arguments (keep in step with tests/calib_test.cc): importance matrix only
moe_models=(
  "mixtral-h256|--preset tiny-mixtral --hidden 256 --ffn 256 --layers 2"
  "qwen2moe-h128|--preset tiny-qwen2moe --hidden 128 --layers 2"
  "deepseek2-mla|--preset tiny-deepseek2"
)

head -c 200000 "$LUMEN_SHARED/corpus/war-and-peace.txt" > "$tmp/calib.txt"

for m in "${moe_models[@]}"; do
  name=${m%%|*}; args=${m#*|}
  # shellcheck disable=SC2086
  "$LUMEN" synth $args --type f16 -o "$tmp/$name-f16.gguf" -t 2 > /dev/null
  "$LLAMA_BIN/llama-imatrix" -m "$tmp/$name-f16.gguf" -f "$tmp/calib.txt" -o "$out/$name.imatrix" -c 128 --chunks 8 \
      -t 2 > "$tmp/imatrix.log" 2>&1
  echo "$name: $(wc -c < "$out/$name.imatrix") bytes of importance matrix"
done
[ "${1:-}" = moe ] && exit 0
fnv() { python3 -c "import sys
h=0xcbf29ce484222325
for b in open(sys.argv[1],'rb').read(): h=((h^b)*0x100000001b3)&0xffffffffffffffff
print('%016x'%h)" "$1"; }

for m in "${models[@]}"; do
  name=${m%%|*}; args=${m#*|}
  f16="$tmp/$name-f16.gguf"
  # shellcheck disable=SC2086
  "$LUMEN" synth $args --type f16 -o "$f16" -t 2 > /dev/null
  "$LLAMA_BIN/llama-imatrix" -m "$f16" -f "$tmp/calib.txt" -o "$out/$name.imatrix" -c 128 --chunks 8 -t 2 \
      > "$tmp/imatrix.log" 2>&1
  txt="$out/$name.txt"
  echo "# input $(fnv "$f16") synth $args" > "$txt"
  for mix in $mixes; do
    for im in 0 1; do
      flags=()
      [ "$im" = 1 ] && flags=(--imatrix "$out/$name.imatrix")
      if ! "$LLAMA_BIN/llama-quantize" "${flags[@]}" "$f16" "$tmp/q.gguf" "$mix" 2 > "$tmp/q.log" 2>&1; then
        echo "  $name $mix imatrix=$im: llama-quantize refused ($(grep -m1 -i 'error\|missing' "$tmp/q.log"))"
        continue
      fi
      "$LUMEN" info -m "$tmp/q.gguf" --tensors --json | python3 -c "
import json, sys
for t in json.load(sys.stdin)['tensors']:
    print('$mix $im', t['name'], t['type'], t['fnv1a'])" >> "$txt"
    done
  done
  echo "$name: $(grep -vc '^#' "$txt") tensor lines"
done
