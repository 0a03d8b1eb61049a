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
#
# The held-out sweep (issue 13): IQ_SWEEP=1 makes, instead of the committed cases, every
# llama-quantize type (--pure) and every mix users download (no --pure, no imatrix) of seven
# other bases (SWEEP_BASES: hidden 96-512, head dim 32-128, hidden and MLP sizes that are
# and are not multiples of 256, GQA 1-8, 2-4 layers, tied and untied, qwen2 biases, vocab
# 512-1000), into $IQ_OUT (default: this directory; give another for the sweep), one
# directory per case named <base>-<p|m>-<type>. Then run them:
#
#   IQ_SWEEP=1 IQ_OUT=/tmp/sweep/cases GOLDEN=/tmp/llamacpp_golden tests/data/iq/make_cases.sh [CASE...]
#   LUMEN_ARCH_CASES=/tmp/sweep/cases LUMEN_SHARED=../shared build/tests/lumen_arch_golden_tests
#
# A type llama-quantize will not write for a base (it refuses low-bit types without
# importance data even with --pure) is retried with the imatrix, then with a q8_0
# token_embd; a file it cannot write at all is listed and skipped. Tolerances are those of
# the committed case of the same type where there is one (README.md); the other types have
# none yet, 0.03 there is a placeholder (sweep.md has the errors measured per type and base).
# IQ_OUT alone (without IQ_SWEEP) writes the committed cases elsewhere, to compare.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
lumen=${LUMEN_BIN:-$root/build/lumen}
LLAMA=${LLAMA:-/work/peer/llama.cpp/build/bin}
GOLDEN=${GOLDEN:-/tmp/llamacpp_golden}
export LUMEN_SHARED=${LUMEN_SHARED:-$root/../shared}
out=${IQ_OUT:-$here}
sweep=${IQ_SWEEP:-0}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# base: the synth arguments (smollm2-135m shape, 2 layers, 1 KV head, MLP 256, vocab 512)
declare -A BASES=(
  [h256]="--hidden 256 --heads 4 --seed 21"
  [h160]="--hidden 160 --heads 5 --seed 23"
)
# The sweep's bases: all synth arguments (qwen2.5-0.5b's preset has q/k/v biases; smollm2's
# and qwen2.5's are tied, tiny-llama's untied; head dim = hidden / heads).
declare -A SWEEP_BASES=(
  [h512d64]="--preset smollm2-135m --type f16 --hidden 512 --heads 8 --kv-heads 4 --ffn 768 --layers 2 --vocab 640 --seed 101"
  [h512d128]="--preset smollm2-135m --type f16 --hidden 512 --heads 4 --kv-heads 1 --ffn 352 --layers 3 --vocab 768 --seed 102"
  [h384]="--preset smollm2-135m --type f16 --hidden 384 --heads 6 --kv-heads 2 --ffn 768 --layers 2 --vocab 1000 --seed 103"
  [h96]="--preset tiny-llama --type f16 --hidden 96 --heads 3 --kv-heads 1 --ffn 352 --layers 4 --vocab 512 --seed 104"
  [qw224]="--preset qwen2.5-0.5b --type f16 --hidden 224 --heads 7 --kv-heads 1 --ffn 768 --layers 2 --vocab 900 --seed 106"
  [qw256]="--preset qwen2.5-0.5b --type f16 --hidden 256 --heads 4 --kv-heads 2 --ffn 352 --layers 2 --vocab 512 --seed 105"
  [qw256d128]="--preset qwen2.5-0.5b --type f16 --hidden 256 --heads 2 --kv-heads 1 --ffn 512 --layers 2 --vocab 512 --seed 107"
)
synth_args() {
  if [ "$sweep" = 1 ]; then echo "${SWEEP_BASES[$1]}"; return; fi
  echo "--preset smollm2-135m --type f16 ${BASES[$1]} --layers 2 --kv-heads 1 --ffn 256 --vocab 512"
}

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

# The sweep's cases: every base x (each type --pure; each mix as downloaded). The IQ types
# take the imatrix (as the committed cases); llama-quantize's IQ2_M writes iq2_s tensors (its
# IQ2_S writes iq2_xs, the same as IQ2_XS, so it is left out).
PURE_TYPES=(Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS IQ3_S IQ3_XXS IQ2_XXS IQ2_XS
  IQ2_M IQ1_S IQ1_M)
MIX_TYPES=(Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K Q8_0 IQ4_XS IQ3_M IQ2_M)
# Tolerance by case type: the committed case of that type (README.md), else SWEEP_TOL.
declare -A SWEEP_TOL=(
  [p-iq4_nl]=0.02 [p-iq4_xs]=0.02 [p-iq3_s]=0.03 [p-iq3_xxs]=0.03 [p-iq2_m]=0.02 [p-iq2_xs]=0.02
  [p-iq2_xxs]=0.02 [p-iq1_s]=0.02 [p-iq1_m]=0.03 [m-q2_k]=0.015 [m-q3_k_m]=0.02
)
sweep_tol() { echo "${SWEEP_TOL[$1]:-0.03}"; }
if [ "$sweep" = 1 ]; then
  CASES=()
  for b in $(printf '%s\n' "${!SWEEP_BASES[@]}" | sort); do
    for t in "${PURE_TYPES[@]}"; do
      k="p-${t,,}"
      im=""; [[ $t == IQ* ]] && im=" --imatrix IMATRIX"
      CASES+=("$b-$k|$b|$t|$(sweep_tol "$k")|--pure$im")
    done
    for t in "${MIX_TYPES[@]}"; do
      k="m-${t,,}"
      CASES+=("$b-$k|$b|$t|$(sweep_tol "$k")|")
    done
  done
fi

# Only the bases the chosen cases use are made.
declare -A NEED=()
for row in "${CASES[@]}"; do
  IFS='|' read -r name base _ <<<"$row"
  if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
  NEED[$base]=1
done
head -c 60000 "$LUMEN_SHARED/corpus/war-and-peace.txt" >"$tmp/calib.txt"
for b in "${!NEED[@]}"; do
  # shellcheck disable=SC2046
  "$lumen" synth $(synth_args "$b") -t 1 -o "$tmp/$b.gguf" >/dev/null
  "$LLAMA/llama-imatrix" -m "$tmp/$b.gguf" -f "$tmp/calib.txt" -o "$tmp/$b.imatrix" -c 128 -t 1 \
    --chunks 40 >/dev/null 2>&1
done
for row in "${CASES[@]}"; do
  IFS='|' read -r name base qtype tol flags <<<"$row"
  if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
  dir="$out/$name"
  mkdir -p "$dir"
  # llama-quantize refuses some low-bit types without importance data (for the sweep's
  # bases: retry with the imatrix, then with a q8_0 token_embd as the committed cases, then
  # also a q8_0 output.weight: llama-imatrix collects none for an untied output).
  tries=("$flags")
  if [ "$sweep" = 1 ]; then
    im=""; [[ $flags == *IMATRIX* ]] || im="--imatrix IMATRIX "
    [ -z "$im" ] || tries+=("${flags:+$flags }${im% }")
    tries+=("${flags:+$flags }${im}--token-embedding-type q8_0")
    tries+=("${flags:+$flags }${im}--token-embedding-type q8_0 --output-tensor-type q8_0")
  fi
  ok=0
  for flags in "${tries[@]}"; do
    # shellcheck disable=SC2086
    if "$LLAMA/llama-quantize" ${flags//IMATRIX/$tmp/$base.imatrix} "$tmp/$base.gguf" "$dir/model.gguf" \
      "$qtype" 1 >"$tmp/q.log" 2>&1; then ok=1; break; fi
  done
  if [ $ok = 0 ]; then
    echo "$name: llama-quantize refuses it: $(grep -iE "error|fail|abort|assert" "$tmp/q.log" | head -1)"
    rm -rf "$dir"
    continue
  fi
  if ! "$GOLDEN" -m "$dir/model.gguf" --prompts "$here/../arch/prompts.json" -o "$dir/golden.json" \
    --reference-name "llama.cpp c392e5094 (build 4748), native CPU build" 2>"$tmp/g.log"; then
    echo "$name: llama.cpp cannot run it: $(tail -1 "$tmp/g.log")"
    rm -rf "$dir"
    continue
  fi
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
