#!/usr/bin/env bash
# Regenerates tests/data/iq/<case>/ (model.gguf, golden.json, case.json): small random-weight
# models quantized by llama.cpp's own llama-quantize to each i-quant type, and llama.cpp's
# teacher-forced logits for them (the format of tests/data/arch/FORMAT.md). A hand script,
# not run by the build or CI. It needs lumen built in build/ (for `lumen synth`), the llama.cpp
# build beside the repository, and tools/llamacpp_golden.cc compiled against it (see the
# comment at its top) as $GOLDEN:
#
#   GOLDEN=/tmp/llamacpp_golden tests/data/iq/make_cases.sh [CASE...]   # default: every case
#
# The F16 base models come from `lumen synth`; the imatrix the low-bit types need is made by
# llama-imatrix on the first 60 kB of War and Peace ($LUMEN_SHARED/corpus). Every tensor is
# quantized to the case's type (--pure) except where llama-quantize itself says otherwise:
# token_embd of the types that refuse to quantize a tensor without importance data (the
# embedding has none) is q8_0. (llama-quantize's type IQ2_M is the one whose tensors are iq2_s;
# its IQ2_S writes iq2_xs.)
#
# The mix cases (q2_k-h160, q3_k_m-h160) are llama-quantize's Q2_K and Q3_K_M mixes as a user
# downloads them (no --pure, no imatrix) of a model whose hidden size, 160, is not a multiple
# of 256: every tensor with 160 columns falls back from q2_K / q3_K to iq4_nl (and from q6_K
# to q8_0), so these files mix K-quants with iq4_nl.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
lumen=${LUMEN_BIN:-$root/build/lumen}
LLAMA=${LLAMA:-/work/peer/llama.cpp/build/bin}
GOLDEN=${GOLDEN:-/tmp/llamacpp_golden}
export LUMEN_SHARED=${LUMEN_SHARED:-$root/../shared}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# base: the synth arguments (smollm2-135m shape, 2 layers, 1 KV head, MLP 256, vocab 512)
declare -A BASES=(
  [h256]="--hidden 256 --heads 4 --seed 21"
  [h160]="--hidden 160 --heads 5 --seed 23"
)
synth_args() { echo "--preset smollm2-135m --type f16 ${BASES[$1]} --layers 2 --kv-heads 1 --ffn 256 --vocab 512"; }
head -c 60000 "$LUMEN_SHARED/corpus/war-and-peace.txt" >"$tmp/calib.txt"
for b in "${!BASES[@]}"; do
  # shellcheck disable=SC2046
  "$lumen" synth $(synth_args "$b") -t 1 -o "$tmp/$b.gguf" >/dev/null
  "$LLAMA/llama-imatrix" -m "$tmp/$b.gguf" -f "$tmp/calib.txt" -o "$tmp/$b.imatrix" -c 128 -t 1 \
    --chunks 40 >/dev/null 2>&1
done

# case | base | llama-quantize type | tolerance (README.md) | llama-quantize flags (IMATRIX:
# the base's importance matrix)
CASES=(
  "iq4_nl|h256|IQ4_NL|0.02|--pure --imatrix IMATRIX"
  "iq4_xs|h256|IQ4_XS|0.02|--pure --imatrix IMATRIX"
  "iq3_s|h256|IQ3_S|0.03|--pure --imatrix IMATRIX"
  "iq3_xxs|h256|IQ3_XXS|0.03|--pure --imatrix IMATRIX"
  "iq2_s|h256|IQ2_M|0.02|--pure --imatrix IMATRIX --token-embedding-type q8_0"
  "iq2_xs|h256|IQ2_XS|0.02|--pure --imatrix IMATRIX --token-embedding-type q8_0"
  "iq2_xxs|h256|IQ2_XXS|0.02|--pure --imatrix IMATRIX --token-embedding-type q8_0"
  "iq1_s|h256|IQ1_S|0.02|--pure --imatrix IMATRIX --token-embedding-type q8_0"
  "iq1_m|h256|IQ1_M|0.03|--pure --imatrix IMATRIX"
  "q2_k-h160|h160|Q2_K|0.015|"
  "q3_k_m-h160|h160|Q3_K_M|0.02|"
)
for row in "${CASES[@]}"; do
  IFS='|' read -r name base qtype tol flags <<<"$row"
  if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
  dir="$here/$name"
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  "$LLAMA/llama-quantize" ${flags//IMATRIX/$tmp/$base.imatrix} "$tmp/$base.gguf" "$dir/model.gguf" \
    "$qtype" 1 >"$tmp/q.log" 2>&1
  "$GOLDEN" -m "$dir/model.gguf" --prompts "$here/../arch/prompts.json" -o "$dir/golden.json" \
    --reference-name "llama.cpp c392e5094 (build 4748), native CPU build" 2>/dev/null
  types=$(grep -o "converting to [a-zA-Z0-9_]*" "$tmp/q.log" | sort | uniq -c | awk '{printf "%s%s x%s", sep, $4, $1; sep=", "}')
  cat >"$dir/case.json" <<JSON
{
  "synth": "lumen synth $(synth_args "$base")",
  "quantize": "llama-quantize ${flags:+$flags }F16.gguf model.gguf $qtype",
  "tensors": "$types",
  "golden": "tools/llamacpp_golden.cc --prompts prompts.json (defaults)",
  "reference": "llama.cpp c392e5094 (build 4748), native CPU build",
  "tol": $tol,
  "tol_why": "2-3x the largest error measured over both kernel tables; see README.md"
}
JSON
  echo "$name: $(stat -c %s "$dir/model.gguf") + $(stat -c %s "$dir/golden.json") bytes; tensors: $types"
done
