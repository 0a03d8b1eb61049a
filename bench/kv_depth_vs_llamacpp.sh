#!/usr/bin/env bash
# Decode and prefill at depth, lumen against a native llama.cpp with flash attention and
# the same KV cache type (issue 16, acceptance 3). Same GGUF file, same threads, alternating.
#
#   bench/kv_depth_vs_llamacpp.sh --llama-batched-bench BIN -m FILE [-m FILE ...]
#       [-d 4096,16384] [-n 128] [--kv-type f16,q8_0,q4_0] [-t 2] [--rounds 2] [--lumen build/lumen]
#
# llama.cpp's llama-bench at the peer's commit (c392e5094) has no -d, so the peer is its
# llama-batched-bench, which prefills D tokens (ubatch 512) and then times N decode steps:
#   llama-batched-bench -m F -c D+N+16 -npp D -ntg N -npl 1 -fa -ctk T -ctv T -t 2 -tb 2 --output-format jsonl
#     -> speed_pp (the depth's prefill, tok/s) and speed_tg (decode at depth D..D+N)
#   lumen bench -m F -p 0 -n N -d D -r 1 -fa on -ctk T -ctv T -t 2 --membw --json
#     -> tgN@dD tok/s, its % of the bandwidth read around the run (weights + the KV read at
#        that depth: the phased roofline's memory roof), and depth_prefill_tok_s (the depth
#        prefilled in chunks of 512, as llama.cpp's ubatch)
# The depth-prefill columns at -d 8192 are issue 16's "prefill of 8k tokens" (both engines
# prefill 8192 tokens in chunks of 512 from an empty cache):
#   bench/kv_depth_vs_llamacpp.sh --llama-batched-bench BIN -m F -d 4096,8192,16384 -n 64
# Each figure is the median over --rounds (the engine going first alternates), with the
# range. Raw JSON lines go to /tmp/kv-depth-<time>.jsonl. The machine should be quiet: the
# script prints `uptime` before and after; a loaded machine's figures are not results.
# Nothing of llama.cpp is built or committed here: pass the binary of an existing build.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
lumen="$repo/build/lumen"
peer=""
models=()
depths="4096,16384"
n_gen=128
kv_types="f16,q8_0,q4_0"
threads=2
rounds=2

while [[ $# -gt 0 ]]; do
  case "$1" in
    --lumen) lumen=$2; shift 2 ;;
    --llama-batched-bench) peer=$2; shift 2 ;;
    -m) models+=("$2"); shift 2 ;;
    -d) depths=$2; shift 2 ;;
    -n) n_gen=$2; shift 2 ;;
    --kv-type) kv_types=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "kv_depth_vs_llamacpp.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

[[ -x "$lumen" ]] || { echo "kv_depth_vs_llamacpp.sh: no lumen binary at $lumen (build it, or pass --lumen)" >&2; exit 1; }
[[ -n "$peer" && -x "$peer" ]] || { echo "kv_depth_vs_llamacpp.sh: pass --llama-batched-bench BIN (an existing llama.cpp build)" >&2; exit 1; }
[[ ${#models[@]} -gt 0 ]] || { echo "kv_depth_vs_llamacpp.sh: pass at least one -m FILE" >&2; exit 1; }
for f in "${models[@]}"; do [[ -f "$f" ]] || { echo "kv_depth_vs_llamacpp.sh: no model file $f" >&2; exit 1; }; done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "kv_depth_vs_llamacpp.sh: --rounds must be a positive integer" >&2; exit 2; }

out="/tmp/kv-depth-$(date +%Y%m%d-%H%M%S).jsonl"
echo "machine: $(nproc) cpus; before: $(uptime)"
IFS=',' read -r -a depth_list <<<"$depths"
IFS=',' read -r -a type_list <<<"$kv_types"

run_lumen() {  # file type depth round
  "$lumen" bench -m "$1" -t "$threads" -p 0 -n "$n_gen" -d "$3" -r 1 -fa on -ctk "$2" -ctv "$2" --membw --json 2>/dev/null |
    python3 -c '
import json, sys
for r in json.load(sys.stdin):
    if "@d" not in r["test"]: continue
    print(json.dumps({"engine": "lumen", "file": sys.argv[1], "type": sys.argv[2], "depth": int(sys.argv[3]),
                      "round": int(sys.argv[4]), "tg": r["tok_s"], "pp": r.get("depth_prefill_tok_s"),
                      "pct": r.get("pct_bandwidth"), "gb_s": r.get("gb_s")}))' "$@"
}
run_llama() {  # file type depth round
  "$peer" -m "$1" -c $(($3 + n_gen + 16)) -npp "$3" -ntg "$n_gen" -npl 1 -fa -ctk "$2" -ctv "$2" \
      -t "$threads" -tb "$threads" --output-format jsonl 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    if not line.strip().startswith("{"): continue
    r = json.loads(line)
    print(json.dumps({"engine": "llama.cpp", "file": sys.argv[1], "type": sys.argv[2], "depth": int(sys.argv[3]),
                      "round": int(sys.argv[4]), "tg": r["speed_tg"], "pp": r["speed_pp"]}))' "$@"
}
for f in "${models[@]}"; do
  for t in "${type_list[@]}"; do
    for d in "${depth_list[@]}"; do
      for ((round = 0; round < rounds; ++round)); do
        echo "  $(basename "$f") $t d$d round $((round + 1))/$rounds" >&2
        if (( round % 2 == 0 )); then
          run_lumen "$f" "$t" "$d" "$round" >>"$out"; run_llama "$f" "$t" "$d" "$round" >>"$out"
        else
          run_llama "$f" "$t" "$d" "$round" >>"$out"; run_lumen "$f" "$t" "$d" "$round" >>"$out"
        fi
      done
    done
  done
done
echo "after: $(uptime)"
echo "raw results: $out"

python3 - "$out" "$n_gen" <<'EOF'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
n_gen = sys.argv[2]
def med(xs): return statistics.median(xs) if xs else float("nan")
def rng(xs): return f"[{min(xs):.1f}-{max(xs):.1f}]" if xs else ""
def ratio(a, b): return a / b if b == b and b > 0 else float("nan")
keys = []
for r in rows:
    k = (r["file"], r["type"], r["depth"])
    if k not in keys: keys.append(k)
print(f"\nflash attention, tg{n_gen} at depth and the depth's prefill, medians [ranges]")
print(f"{'model':<28} {'kv':<5} {'depth':>6} {'lumen tg':>9} {'range':>13} {'llama tg':>9} {'range':>13} {'ratio':>6} "
      f"{'% roof':>7} {'lumen pp':>9} {'llama pp':>9} {'ratio':>6}")
for k in keys:
    lu = [r for r in rows if (r["file"], r["type"], r["depth"]) == k and r["engine"] == "lumen"]
    ll = [r for r in rows if (r["file"], r["type"], r["depth"]) == k and r["engine"] == "llama.cpp"]
    a, b = med([r["tg"] for r in lu]), med([r["tg"] for r in ll])
    pa, pb = med([r["pp"] for r in lu if r.get("pp")]), med([r["pp"] for r in ll])
    pct = med([r["pct"] for r in lu if r.get("pct")])
    print(f"{os.path.basename(k[0]):<28} {k[1]:<5} {k[2]:>6} {a:>9.1f} {rng([r['tg'] for r in lu]):>13} {b:>9.1f} "
          f"{rng([r['tg'] for r in ll]):>13} {ratio(a, b):>5.2f}x {pct:>6.0f}% {pa:>9.1f} {pb:>9.1f} {ratio(pa, pb):>5.2f}x")
EOF
