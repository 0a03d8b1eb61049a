#!/usr/bin/env bash
# Regenerates the flash-attention goldens in tests/data/fa/ (the arch harness's format,
# tests/data/arch/FORMAT.md; run by ctest as FlashGoldens). A hand script, not run by the
# build or CI: it needs lumen built in build/ and tools/llamacpp_golden.cc compiled against
# /work/peer/llama.cpp (c392e5094) as its top comment says, at $GOLDEN_OLD.
#
#   fa-stories260K-f16, fa-TinyStories-656K-Q8_0-f16   llama.cpp -fa, f16 cache, shared models
#   fa-llama-hd32-{f16,q8_0,q4_0}                       llama.cpp -fa -ctk/-ctv T, a synth model
#                                                       of head size 32 (the shared models' 8
#                                                       and 16 cannot hold 32-element blocks)
#   fa-stories260K-f32-exact                            llama.cpp without -fa, f32 cache: exact
#                                                       math, which lumen's -fa must match
# Each case.json states its tolerance and how it was calibrated.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
GOLDEN_OLD=${GOLDEN_OLD:-/tmp/llamacpp_golden}
export LUMEN_SHARED=${LUMEN_SHARED:-$root/../shared}
ref="llama.cpp c392e5094 (build 4748), native CPU build"
gold() { "$GOLDEN_OLD" --prompts "$here/prompts.json" --full-every 128 --reference-name "$ref" "$@" 2>/dev/null >/dev/null; }

"$root/build/lumen" synth --preset tiny-llama --type f16 --seed 21 --hidden 64 --heads 4 --kv-heads 2 --head-dim 32 \
  --layers 2 --ffn 128 -t 1 -o "$here/fa-llama-hd32-f16/model.gguf" >/dev/null
for kv in f16 q8_0 q4_0; do
  gold -m "$here/fa-llama-hd32-f16/model.gguf" -o "$here/fa-llama-hd32-$kv/golden.json" --flash-attn --kv-type $kv
done
gold -m "$LUMEN_SHARED/models/stories260K/stories260K.gguf" -o "$here/fa-stories260K-f16/golden.json" --flash-attn
gold -m "$LUMEN_SHARED/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf" \
  -o "$here/fa-TinyStories-656K-Q8_0-f16/golden.json" --flash-attn
gold -m "$LUMEN_SHARED/models/stories260K/stories260K.gguf" -o "$here/fa-stories260K-f32-exact/golden.json" --kv-type f32
