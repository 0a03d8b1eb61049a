#!/usr/bin/env bash
# Two replicas pinned to one core each vs one replica on both cores, both through HAProxy
# with deploy/haproxy.cfg, on a shared-prefix and a random workload (issue 18, acceptance 2).
#
#   bench/serve_replicas.sh
#
# Configurations (the same total KV memory and cores):
#   one   `lumen serve --cpus 0-1` (2 compute threads); HAProxy's two server lines both name it
#   pair  `lumen serve --cpus 0` and `--cpus 1` (1 thread each), --kv-memory halved
# Workloads (`lumen bench serve`, streaming /v1/completions, greedy, ignore_eos, prompts as
# text so HAProxy can read their beginning):
#   shared  8 prefix groups of SHARED words before 64 words of their own
#   random  256 words per prompt, nothing shared
# Printed: one line per run (output tok/s, TTFT p50/p99, TPOT p50, cached-token ratio) and
# the memory bandwidth around them (`lumen bench --membw`), for reading the machine's load.
#
# Environment: LUMEN (build/lumen), MODEL (default: a synthetic qwen2.5-0.5b q4_0 made by
# `lumen synth`), CONC (8), REQUESTS (32), MAX_TOKENS (64), SHARED (256), KV (1GiB, total),
# CTX (2048), WORK (/tmp/lumen-serve-replicas), PORT (18280; replicas on PORT+1, PORT+2),
# LUMEN_SHARED (../shared). Needs haproxy (scripts/setup.sh installs it).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LUMEN=${LUMEN:-$ROOT/build/lumen}
CONC=${CONC:-8}
REQUESTS=${REQUESTS:-32}
MAX_TOKENS=${MAX_TOKENS:-64}
SHARED=${SHARED:-256}
KV=${KV:-1GiB}
CTX=${CTX:-2048}
WORK=${WORK:-/tmp/lumen-serve-replicas}
PORT=${PORT:-18280}
export LUMEN_SHARED=${LUMEN_SHARED:-$ROOT/../shared}

die() { echo "serve_replicas: $*" >&2; exit 1; }
[ -x "$LUMEN" ] || die "no lumen binary at $LUMEN (build it, or set LUMEN=...)"
command -v haproxy > /dev/null || die "haproxy is not installed (scripts/setup.sh installs it)"
mkdir -p "$WORK"
MODEL=${MODEL:-$WORK/qwen2.5-0.5b-q4_0.gguf}
if [ ! -f "$MODEL" ]; then
  echo "== synthesizing $MODEL"
  "$LUMEN" synth --preset qwen2.5-0.5b --type q4_0 -o "$MODEL" -t 2 >&2
fi

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -TERM "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; PIDS=(); }
trap cleanup EXIT

wait_ready() {  # port
  for _ in $(seq 1 600); do
    if exec 3<> "/dev/tcp/127.0.0.1/$1" 2> /dev/null; then
      printf 'GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3
      if head -c 12 <&3 | grep -q 200; then exec 3>&-; return 0; fi
      exec 3>&-
    fi
    sleep 0.2
  done
  die "nothing ready on port $1"
}

serve() {  # port id cpus kv
  "$LUMEN" serve -m "$MODEL" --port "$1" --replica-id "$2" --cpus "$3" --kv-memory "$4" -c "$CTX" \
    --max-seqs "$CONC" --max-connections-per-client 0 2>> "$WORK/serve-$2.log" &
  PIDS+=($!)
}

balancer() {  # replica port a, replica port b
  LUMEN_LISTEN=127.0.0.1:$PORT LUMEN_REPLICA_A=127.0.0.1:$1 LUMEN_REPLICA_B=127.0.0.1:$2 \
    LUMEN_HAPROXY_SOCKET=$WORK/haproxy.sock haproxy -f "$ROOT/deploy/haproxy.cfg" -db > "$WORK/haproxy.log" 2>&1 &
  PIDS+=($!)
  wait_ready "$PORT"
  sleep 1.5  # two passing health checks per server
}

workload() {  # name
  local args=(--url "http://127.0.0.1:$PORT" --prompt-format text --concurrency "$CONC" --requests "$REQUESTS"
              --max-tokens "$MAX_TOKENS" --json)
  if [ "$1" = shared ]; then args+=(--shared-prefix "$SHARED" --prefix-groups 8 --prompt-tokens 64)
  else args+=(--prompt-tokens 256); fi
  "$LUMEN" bench serve "${args[@]}"
}

membw() { "$LUMEN" bench --membw -t 2 2>&1 | grep -o '[0-9.]* GB/s' | head -1; }

half_kv() {  # "1GiB" -> "512MiB"
  local n=${KV%%[A-Za-z]*} unit=${KV##*[0-9.]}
  if [ "$unit" = GiB ]; then echo "$((n * 512))MiB"; else echo "$((n / 2))$unit"; fi
}

echo "model $(basename "$MODEL"), concurrency $CONC, $REQUESTS requests of $MAX_TOKENS tokens per run; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for config in one pair; do
  if [ "$config" = one ]; then
    serve $((PORT + 1)) one 0-1 "$KV"; wait_ready $((PORT + 1)); balancer $((PORT + 1)) $((PORT + 1))
  else
    serve $((PORT + 1)) a 0 "$(half_kv)"; serve $((PORT + 2)) b 1 "$(half_kv)"
    wait_ready $((PORT + 1)); wait_ready $((PORT + 2)); balancer $((PORT + 1)) $((PORT + 2))
  fi
  for w in shared random; do
    bw_before=$(membw)
    line=$(workload "$w")
    bw_after=$(membw)
    echo "$config $w: $line | membw $bw_before before, $bw_after after"
  done
  cleanup
done
