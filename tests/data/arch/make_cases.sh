#!/usr/bin/env bash
# Regenerates tests/data/arch/<case>/ (model.gguf, golden.json, case.json): FORMAT.md says
# what they are. A hand script, not run by the build or CI; it needs lumen built in build/
# and the golden tool compiled against the two llama.cpp builds (see the comment at the
# top of tools/llamacpp_golden.cc):
#
#   GOLDEN_OLD=/tmp/llamacpp_golden            llama.cpp c392e5094 (/work/peer/llama.cpp)
#   GOLDEN_NLC=/tmp/llamacpp_golden_nlc        llama.cpp inside node-llama-cpp 3.22.1
#   NLC_BINS=/tmp/nlc/bins                     its CPU libraries (@node-llama-cpp/linux-x64)
#
#   tests/data/arch/make_cases.sh [CASE...]    (default: every case below)
#
# The same cases at other shapes and seeds, into another directory (not committed; run the
# harness on them with LUMEN_ARCH_CASES=DIR build/tests/lumen_arch_golden_tests):
#
#   ARCH_OUT=/tmp/sweep ARCH_SEED_ADD=100 ARCH_EXTRA="--layers 7 --sliding-window 8" make_cases.sh
#
# Two runs give byte-identical files (synth is deterministic, the goldens use one thread).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
lumen="$root/build/lumen"
GOLDEN_OLD=${GOLDEN_OLD:-/tmp/llamacpp_golden}
GOLDEN_NLC=${GOLDEN_NLC:-/tmp/llamacpp_golden_nlc}
NLC_BINS=${NLC_BINS:-/tmp/nlc/bins}
export LUMEN_SHARED=${LUMEN_SHARED:-$root/../shared}

OLD_NAME="llama.cpp c392e5094 (build 4748), native CPU build"
NUMPY_NAME="numpy reference tests/ref/arch_ref.py (float64, no f16 rounding: the harness uses an f32 KV cache)"
NLC_NAME="llama.cpp of node-llama-cpp 3.22.1 (bundle de3ff81, release v0.5.0), prebuilt linux-x64 CPU libraries"

# name | synth preset | seed | extra synth flags | reference (old|nlc|numpy) | why this reference
#   [| extra golden tool flags]
#
# The deepseek2 cases (multi-head latent attention) take their goldens with an f32 KV cache:
# llama.cpp c392e5094 caches per-head K and V expanded from the latent, lumen the latent
# itself (the absorbed form, src/model/mla_block.cc), so an f16 cache rounds different
# numbers on the two sides (max |dlogit| 0.05 on deepseek2-mla); with f32 caches they agree
# within 1e-5, which is what the goldens check.
CASES=(
  "llama-gqa|tiny-llama|1||old|"
  "qwen2|tiny-qwen2|2||old|"
  "qwen3|tiny-qwen3|3||nlc|c392e5094 has no qwen3"
  "gemma|tiny-gemma|5||old|"
  "gemma2-swa|tiny-gemma2|4||nlc|c392e5094 aborts on a gemma2 of other than 26, 42 or 46 layers"
  "gemma3-swa|tiny-gemma3|6||nlc|c392e5094 has no gemma3"
  "phi3-swa|tiny-phi3|7||old|the newer llama.cpp ignores phi3's sliding window"
  "phi3-longrope|tiny-phi3-longrope|8||old|"
  "stablelm-partial-rotary|tiny-stablelm|9||old|"
  "starcoder2|tiny-starcoder2|10||old|"
  "smollm3-nope|tiny-smollm3|11||nlc|c392e5094 has no smollm3"
  "mistral-swa|tiny-mistral|12||numpy|no llama.cpp honours a llama (Mistral) file's sliding window"
  "llama-cla|tiny-llama-cla|13||numpy|no llama.cpp has cross-layer KV sharing"
  "qwen3moe|tiny-qwen3moe|14||nlc|c392e5094 has no qwen3moe"
  "olmoe|tiny-olmoe|15||old|"
  "mixtral|tiny-mixtral|16||old|"
  "qwen2moe-shared-expert|tiny-qwen2moe|17||old|"
  "deepseek2-mla|tiny-deepseek2|18||old||--kv-type f32"
  "deepseek2-lite-mla|tiny-deepseek2-lite|19||old||--kv-type f32"
  "deepseek3-sigmoid-router|tiny-deepseek3|20||old||--kv-type f32"
)

want=("$@")
for row in "${CASES[@]}"; do
  IFS='|' read -r name preset seed extra ref why golden_flags <<<"$row"
  if [ ${#want[@]} -gt 0 ] && [[ ! " ${want[*]} " =~ " $name " ]]; then continue; fi
  seed=$((seed + ${ARCH_SEED_ADD:-0}))
  extra="$extra ${ARCH_EXTRA:-}"
  extra="${extra# }"; extra="${extra% }"
  dir="${ARCH_OUT:-$here}/$name"
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  "$lumen" synth --preset "$preset" --type f32 --seed "$seed" $extra -t 1 -o "$dir/model.gguf" >/dev/null
  rm -rf "$dir/hf"
  # shellcheck disable=SC2086
  "$lumen" synth --preset "$preset" --type f32 --seed "$seed" $extra -t 1 --format hf -o "$dir/hf" >/dev/null 2>&1 ||
    rm -rf "$dir/hf"  # cross-layer KV sharing and mixtures of experts have no Hugging Face form here
  tol=""
  golden_cmd="tools/llamacpp_golden.cc --prompts prompts.json${golden_flags:+ $golden_flags} (defaults: 24 greedy steps, top-8, full rows every 24 positions, f16 KV, flash attention off)"
  if [ "$ref" = numpy ]; then
    golden_cmd="tests/ref/arch_ref.py model.gguf llama-gqa/golden.json golden.json (its prompts; 24 greedy steps, top-8, full rows every 24)"
    # The prompts' ids from a llama.cpp golden of the same vocabulary (the reference has no
    # tokenizer); lumen with an f32 KV cache is within 1e-5 of it (llama-gqa's weights).
    /usr/bin/python3 "$here/../../ref/arch_ref.py" "$dir/model.gguf" "$here/llama-gqa/golden.json" "$dir/golden.json"
    refname=$NUMPY_NAME
    tol='
  "tol": 1e-3,
  "tol_why": "float64 reference without f16 rounding vs lumen with an f32 KV cache: measured 1e-5 on llama-gqa'"'"'s weights",'
  elif [ "$ref" = old ]; then
    # shellcheck disable=SC2086
    "$GOLDEN_OLD" -m "$dir/model.gguf" --prompts "$here/prompts.json" -o "$dir/golden.json" \
      --reference-name "$OLD_NAME" $golden_flags 2>/dev/null
    refname=$OLD_NAME
  else
    "$GOLDEN_NLC" --backend-dir "$NLC_BINS" -m "$dir/model.gguf" --prompts "$here/prompts.json" \
      -o "$dir/golden.json" --reference-name "$NLC_NAME" 2>/dev/null
    refname=$NLC_NAME
  fi
  cat >"$dir/case.json" <<JSON
{$tol
  "preset": "$preset",
  "synth": "lumen synth --preset $preset --type f32 --seed $seed${extra:+ $extra}$([ -d "$dir/hf" ] && echo ' (and --format hf -o hf)')",
  "golden": "$golden_cmd",
  "reference": "$refname",
  "reference_why": "${why:-the llama.cpp build beside the repository}"
}
JSON
  echo "$name: $(stat -c %s "$dir/model.gguf") + $(stat -c %s "$dir/golden.json") bytes ($ref)"
done
