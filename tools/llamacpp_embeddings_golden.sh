#!/bin/sh
# Writes tests/data/embeddings/llamacpp_tinystories656k.json: llama.cpp's own embeddings of
# two texts (mean and last pooling) from an existing llama-server build, for
# tests/embeddings_test.cc (Embeddings.MatchLlamaCppGolden). Nothing here builds llama.cpp.
#   LLAMA_SERVER=/work/peer/llama.cpp/build/bin/llama-server LUMEN_SHARED=/work/shared tools/llamacpp_embeddings_golden.sh
set -eu
: "${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary}"
: "${LUMEN_SHARED:?set LUMEN_SHARED}"
model="$LUMEN_SHARED/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf"
out="$(dirname "$0")/../tests/data/embeddings/llamacpp_tinystories656k.json"
port=18931
body='{"input":["Once upon a time, there was a little girl named Lily.","The dog ran to the park."]}'
tmp=$(mktemp -d)
for pool in last mean; do
  "$LLAMA_SERVER" -m "$model" --host 127.0.0.1 --port $port --embeddings --pooling $pool -t 1 -c 256 >"$tmp/log" 2>&1 &
  pid=$!
  i=0
  until curl -sf "127.0.0.1:$port/health" >/dev/null; do i=$((i + 1)); [ $i -lt 200 ] || exit 1; sleep 0.1; done
  curl -s "127.0.0.1:$port/v1/embeddings" -d "$body" >"$tmp/$pool.json"
  kill $pid; wait $pid 2>/dev/null || true
done
python3 - "$tmp" "$out" <<'PY'
import json, sys
tmp, out = sys.argv[1], sys.argv[2]
g = {"model": "TinyStories-656K/TinyStories-656K-Q8_0.gguf",
     "source": "llama.cpp c392e5094 llama-server --embeddings --pooling P -c 256, POST /v1/embeddings (tools/llamacpp_embeddings_golden.sh)",
     "inputs": ["Once upon a time, there was a little girl named Lily.", "The dog ran to the park."], "pooling": {}}
for p in ["last", "mean"]:
    g["pooling"][p] = [d["embedding"] for d in json.load(open(f"{tmp}/{p}.json"))["data"]]
json.dump(g, open(out, "w"))
PY
rm -rf "$tmp"
