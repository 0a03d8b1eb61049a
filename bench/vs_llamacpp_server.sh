#!/usr/bin/env bash
# lumen serve vs llama.cpp's llama-server: the same GGUF file, the same workloads, one run,
# ratios printed (issue 5, acceptance 2).
#
#   bench/vs_llamacpp_server.sh
#
# Workloads (driven by `lumen bench serve`, streaming /v1/completions, greedy, ignore_eos):
#   random         200 distinct prompt tokens, 64 output tokens, at concurrency 8 and 16
#   shared-prefix  one 1000-token prefix + 50 distinct tokens, 64 output tokens, concurrency 8
# Each server is restarted per level with as many sequences / slots as clients, continuous
# batching on, and the same KV memory: lumen `--max-seqs C -c CTX` (KV for C full contexts),
# llama-server `-np C -c C*CTX` (the total is split across the slots).
# Prompts are token ids from each server's /tokenize of the same seeded words, so both see
# the same token counts.
#
# Targets: output tok/s >= 1.5x llama-server at concurrency 8 and 16 with p99 TTFT no worse;
# shared prefix >= 3x throughput and >= 3x lower median TTFT.
#
# Environment:
#   LLAMA_SERVER  path to llama.cpp's llama-server; unset: lumen alone (no ratios)
#   LUMEN         lumen binary (default build/lumen)
#   MODEL         GGUF to serve (default: a synthetic qwen2.5-0.5b q4_0 made by `lumen synth`)
#   THREADS (2)  CTX (per sequence, 2048)  REQUESTS (64)  WORK (/tmp/lumen-vs-llamacpp)
#   LUMEN_PORT (18181)  LLAMA_PORT (18182)  LUMEN_SHARED (../shared, for the synth tokenizer)
#   EXTRA_LUMEN_ARGS, EXTRA_LLAMA_ARGS   more flags for either server
#
# Building llama-server (outside this repository: never commit llama.cpp code, binaries or
# build scripts here):
#   git clone https://github.com/ggml-org/llama.cpp ~/src/llama.cpp
#   cmake -S ~/src/llama.cpp -B ~/src/llama.cpp/build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF
#   cmake --build ~/src/llama.cpp/build -j --target llama-server
#   LLAMA_SERVER=~/src/llama.cpp/build/bin/llama-server bench/vs_llamacpp_server.sh
#
# Needs only bash and coreutils (no curl / jq / python).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LUMEN=${LUMEN:-$ROOT/build/lumen}
THREADS=${THREADS:-2}
CTX=${CTX:-2048}
REQUESTS=${REQUESTS:-64}
WORK=${WORK:-/tmp/lumen-vs-llamacpp}
LUMEN_PORT=${LUMEN_PORT:-18181}
LLAMA_PORT=${LLAMA_PORT:-18182}
export LUMEN_SHARED=${LUMEN_SHARED:-$ROOT/../shared}
EXTRA_LUMEN_ARGS=${EXTRA_LUMEN_ARGS:-}
EXTRA_LLAMA_ARGS=${EXTRA_LLAMA_ARGS:-}

die() { echo "vs_llamacpp_server: $*" >&2; exit 1; }
[ -x "$LUMEN" ] || die "no lumen binary at $LUMEN (build it, or set LUMEN=...)"
if [ -n "${LLAMA_SERVER:-}" ]; then
  [ -x "$LLAMA_SERVER" ] || die "LLAMA_SERVER=$LLAMA_SERVER is not an executable"
fi
mkdir -p "$WORK"

MODEL=${MODEL:-$WORK/qwen2.5-0.5b-q4_0.gguf}
if [ ! -f "$MODEL" ]; then
  echo "== synthesizing $MODEL"
  "$LUMEN" synth --preset qwen2.5-0.5b --type q4_0 -o "$MODEL" -t "$THREADS" >&2
fi

SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
trap stop_server EXIT INT TERM

# Waits until something listens on the port (bench serve itself waits out a 503 "loading").
wait_port() {
  local port=$1
  for _ in $(seq 1 600); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then return 1; fi
    sleep 0.1
  done
  return 1
}

# start_server lumen|llama CONCURRENCY
start_server() {
  local which=$1 conc=$2 log="$WORK/$1-c$2.log"
  if [ "$which" = lumen ]; then
    # shellcheck disable=SC2086
    "$LUMEN" serve -m "$MODEL" --port "$LUMEN_PORT" -t "$THREADS" --max-seqs "$conc" -c "$CTX" \
      --max-queue 1024 $EXTRA_LUMEN_ARGS >"$log" 2>&1 &
    SERVER_PID=$!
    wait_port "$LUMEN_PORT" || { cat "$log" >&2; die "lumen serve did not start"; }
  else
    # shellcheck disable=SC2086
    "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$LLAMA_PORT" -t "$THREADS" -np "$conc" \
      -c $((conc * CTX)) -cb $EXTRA_LLAMA_ARGS >"$log" 2>&1 &
    SERVER_PID=$!
    wait_port "$LLAMA_PORT" || { cat "$log" >&2; die "llama-server did not start"; }
  fi
}

# run_level lumen|llama CONCURRENCY PROMPT_TOKENS SHARED_PREFIX -> one JSON line on stdout
run_level() {
  local which=$1 conc=$2 prompt=$3 prefix=$4 port
  trap stop_server EXIT  # this runs in $(...): the parent's trap does not reach its server
  [ "$which" = lumen ] && port=$LUMEN_PORT || port=$LLAMA_PORT
  start_server "$which" "$conc"
  # Warm-up (page in the weights; not measured).
  "$LUMEN" bench serve --url "http://127.0.0.1:$port" --concurrency "$conc" --requests "$conc" \
    --prompt-tokens 16 --max-tokens 4 --json >/dev/null || die "$which: warm-up failed (see $WORK/$which-c$conc.log)"
  "$LUMEN" bench serve --url "http://127.0.0.1:$port" --concurrency "$conc" --requests "$REQUESTS" \
    --prompt-tokens "$prompt" --shared-prefix "$prefix" --max-tokens 64 --json
  stop_server
}

# field JSON NAME -> top-level number;  pfield JSON NAME STAT -> NAME.STAT
field() { grep -o "\"$2\":[-0-9.eE+]*" <<<"$1" | head -1 | cut -d: -f2; }
pfield() { grep -o "\"$2\":{[^}]*}" <<<"$1" | grep -o "\"$3\":[-0-9.eE+]*" | cut -d: -f2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
verdict() { awk -v r="$1" -v t="$2" 'BEGIN { if (r == "n/a") print "?"; else print (r >= t ? "ok" : "MISS") }'; }

summary() {  # NAME JSON
  printf "  %-8s out %8.1f tok/s | %6.2f req/s | goodput %6.2f | TTFT p50 %8.1f p99 %8.1f ms | TPOT p50 %6.1f ms | ok %s failed %s\n" \
    "$1" "$(field "$2" output_tok_s)" "$(field "$2" req_s)" "$(field "$2" goodput_req_s)" \
    "$(pfield "$2" ttft_ms p50)" "$(pfield "$2" ttft_ms p99)" "$(pfield "$2" tpot_ms p50)" \
    "$(field "$2" n_ok)" "$(field "$2" n_failed)"
}

compare() {  # LABEL CONC PROMPT PREFIX KIND(random|shared)
  local label=$1 conc=$2 prompt=$3 prefix=$4 kind=$5 lumen_json llama_json
  echo "== $label: concurrency $conc, prompt $prompt + shared $prefix tokens, 64 out, $REQUESTS requests"
  lumen_json=$(run_level lumen "$conc" "$prompt" "$prefix")
  echo "$lumen_json" >"$WORK/lumen-$label.json"
  summary lumen "$lumen_json"
  [ -n "${LLAMA_SERVER:-}" ] || return 0
  llama_json=$(run_level llama "$conc" "$prompt" "$prefix")
  echo "$llama_json" >"$WORK/llama-$label.json"
  summary llama "$llama_json"
  local tput ttft50 ttft99
  tput=$(ratio "$(field "$lumen_json" output_tok_s)" "$(field "$llama_json" output_tok_s)")
  ttft50=$(ratio "$(pfield "$llama_json" ttft_ms p50)" "$(pfield "$lumen_json" ttft_ms p50)")
  ttft99=$(ratio "$(pfield "$llama_json" ttft_ms p99)" "$(pfield "$lumen_json" ttft_ms p99)")
  if [ "$kind" = shared ]; then
    echo "  ratio   throughput lumen/llama ${tput}x ($(verdict "$tput" 3) vs 3x) | median TTFT llama/lumen ${ttft50}x ($(verdict "$ttft50" 3) vs 3x)"
  else
    echo "  ratio   throughput lumen/llama ${tput}x ($(verdict "$tput" 1.5) vs 1.5x) | p99 TTFT llama/lumen ${ttft99}x ($(verdict "$ttft99" 1) vs 1x: no worse)"
  fi
}

echo "lumen serve vs llama-server | $(basename "$MODEL") | $THREADS threads | ctx $CTX per sequence | $(nproc) cores"
[ -n "${LLAMA_SERVER:-}" ] || echo "(LLAMA_SERVER is not set: lumen alone, no ratios)"
compare random-c8 8 200 0 random
compare random-c16 16 200 0 random
compare shared-prefix-c8 8 50 1000 shared
echo "JSON per run: $WORK/{lumen,llama}-*.json; server logs: $WORK/*.log"
