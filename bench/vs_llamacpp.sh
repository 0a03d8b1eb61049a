#!/usr/bin/env bash
# lumen vs llama.cpp on the same GGUF files, same machine, same thread count, in one run.
#
#   bench/vs_llamacpp.sh [--lumen build/lumen] [--llama-bench BIN | --peer-dir ~/.cache/lumen-peer]
#                        [--models-dir /tmp/lumen-vs-llamacpp] [-t 2] [-r 2] [--rounds 2]
#                        [-d 4096 | --no-depth] [--fa] [--only PRESET:TYPE[,PRESET:TYPE...]]
#                        [-p 512] [-n 128]
#                        [--keep-cache]
#
# The fair peer is a native llama.cpp build (-DGGML_NATIVE=ON) on this machine: pass its
# llama-bench with --llama-bench (built outside the repository; nothing of it is committed).
# Its build may predate llama-bench's -d, so use --no-depth with it. Without --llama-bench:
#
# 1. Installs llama.cpp's prebuilt CPU libraries (npm: node-llama-cpp@3.22.1 and
#    @node-llama-cpp/linux-x64@3.22.1, --ignore-scripts) into --peer-dir, outside the
#    repository. Nothing of llama.cpp is committed here.
# 2. Synthesizes the GGUFs with `lumen synth` (random weights at real shapes): qwen2.5-0.5b
#    q8_0, q4_0, q4_k and llama-3.2-1b q4_k, unless they are already in --models-dir.
# 3. Drops them from the page cache (unless --keep-cache) so that the first reader fills it:
#    lumen maps weights with MADV_HUGEPAGE, so the page cache then holds 2 MiB folios and
#    both engines' mmaps of the file get 2 MiB pages (llama.cpp maps the same page cache).
# 4. For each file, --rounds times, alternating which engine goes first:
#      lumen bench -m F -t T -p 512 -n 128 [-d D] -r R --membw --json
#      node bench/llamacpp_bench.mjs -m F -t T -p 512 -n 128 [-d D] -r R   (see its header
#        for exactly how llama.cpp is timed)
#    and prints per model x type: pp512, tg128 (and tg128@dD) for both, the ratio
#    lumen / llama.cpp, and lumen's tg128 GB/s as % of the bandwidth `lumen bench --membw`
#    read in the same process around and during each repetition ("of X": the readings
#    weighted by the decode time between them, see lumen bench --membw-every), and
#    with --llama-bench llama.cpp's tg GB/s (the same weight bytes a token) as % of the
#    highest of two readings taken just before and after its run. Each
#    figure is the median over rounds of each run's median of -r repetitions. Raw JSON lines go to --models-dir/results-<time>.jsonl.
#
# The machine should be otherwise idle: the script prints `uptime` before and after. On a
# busy machine both engines lose time to preemption, llama.cpp's barrier-synchronised
# threads more than lumen's (each llama.cpp op waits for its slowest thread).
#
# -p / -n set the prompt and generated lengths of both engines' tests (-p 0: decode only,
# e.g. for a table of every weight type).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
lumen="$repo/build/lumen"
peer_dir="${HOME}/.cache/lumen-peer"
models_dir="/tmp/lumen-vs-llamacpp"
threads=2
reps=2
rounds=2
depth=4096
n_prompt=512
n_gen=128
fa=""
only=""
keep_cache=0
peer_version="3.22.1"
llama_bench=""

while [[ $# -gt 0 ]]; do
  case "$1" in
    --lumen|--peer-dir|--llama-bench|--models-dir|-t|-r|--rounds|-d|-p|-n|--only)
      [[ $# -ge 2 ]] || { echo "vs_llamacpp.sh: $1 needs a value" >&2; exit 2; } ;;
  esac
  case "$1" in
    --lumen) lumen=$2; shift 2 ;;
    --peer-dir) peer_dir=$2; shift 2 ;;
    --llama-bench) llama_bench=$2; shift 2 ;;
    --models-dir) models_dir=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -r) reps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -d) depth=$2; shift 2 ;;
    --no-depth) depth=0; shift ;;
    -p) n_prompt=$2; shift 2 ;;
    -n) n_gen=$2; shift 2 ;;
    --fa) fa="--fa"; shift ;;
    --only) only=$2; shift 2 ;;
    --keep-cache) keep_cache=1; shift ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    *) echo "vs_llamacpp.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

for v in "$threads" "$reps" "$rounds" "$depth" "$n_prompt" "$n_gen"; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "vs_llamacpp.sh: '$v' is not a count (-t, -r, --rounds, -d, -p, -n take whole numbers)" >&2; exit 2; }
done
[[ -x "$lumen" ]] || { echo "vs_llamacpp.sh: no lumen binary at $lumen (build it, or pass --lumen)" >&2; exit 1; }
if [[ -n "$llama_bench" ]]; then
  [[ -x "$llama_bench" ]] || { echo "vs_llamacpp.sh: --llama-bench $llama_bench is not an executable" >&2; exit 1; }
else
  command -v node >/dev/null || { echo "vs_llamacpp.sh: node (>= 20) is needed for llama.cpp" >&2; exit 1; }
fi

# --- 1. the peer ---------------------------------------------------------------------------
if [[ -z "$llama_bench" && ! -f "$peer_dir/node_modules/@node-llama-cpp/linux-x64/package.json" ]]; then
  echo "installing node-llama-cpp@$peer_version (llama.cpp prebuilt CPU binaries) into $peer_dir"
  mkdir -p "$peer_dir"
  (cd "$peer_dir" && npm install --no-audit --no-fund --ignore-scripts \
     "node-llama-cpp@$peer_version" "@node-llama-cpp/linux-x64@$peer_version" >/dev/null)
fi

# --- 2. the models -------------------------------------------------------------------------
mkdir -p "$models_dir"
specs=("qwen2.5-0.5b:q8_0" "qwen2.5-0.5b:q4_0" "qwen2.5-0.5b:q4_k" "llama-3.2-1b:q4_k")
[[ -n "$only" ]] && IFS=',' read -r -a specs <<<"$only"
files=()
for spec in "${specs[@]}"; do
  preset=${spec%%:*}; type=${spec##*:}
  f="$models_dir/$preset-$type.gguf"
  if [[ ! -f "$f" ]]; then
    echo "synthesizing $f"
    "$lumen" synth --preset "$preset" --type "$type" -o "$f" >/dev/null
  fi
  files+=("$f")
done

# --- 3. page cache -------------------------------------------------------------------------
if [[ $keep_cache -eq 0 ]]; then
  python3 - "${files[@]}" <<'EOF'
import os, sys
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
EOF
fi

# --- 4. alternate ----------------------------------------------------------------------------
out="$models_dir/results-$(date +%Y%m%d-%H%M%S).jsonl"
echo "machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); before: $(uptime)"
depth_args=()
[[ $depth -gt 0 ]] && depth_args=(-d "$depth")
run_lumen() {
  "$lumen" bench -m "$1" -t "$threads" -p "$n_prompt" -n "$n_gen" "${depth_args[@]}" -r "$reps" --membw --json 2>/dev/null |
    python3 -c 'import json,sys; [print(json.dumps(dict(r, engine="lumen", file=sys.argv[1], round=int(sys.argv[2])))) for r in json.load(sys.stdin)]' "$1" "$2"
}
# One --membw reading with 2 MiB pages (as lumen reads around its own runs), GB/s.
membw_reading() {
  "$lumen" bench --membw -t "$threads" --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["gb_s_hugepages"])'
}
run_llama() {
  if [[ -n "$llama_bench" ]]; then
    local fa_args=() before after
    [[ -n "$fa" ]] && fa_args=(-fa 1)
    # The peer's runs get readings around them too, so that its tg can be set against the
    # bandwidth of its own minutes (the machine's bandwidth moves between regimes within
    # seconds; a ratio of two runs compares the regimes they landed in as much as the engines).
    before=$(membw_reading)
    local lines
    lines=$("$llama_bench" -m "$1" -t "$threads" -p "$n_prompt" -n "$n_gen" "${depth_args[@]}" -r "$reps" "${fa_args[@]}" -o jsonl 2>/dev/null)
    after=$(membw_reading)
    python3 -c '
import json, statistics, sys
for line in sys.stdin:
    if not line.strip().startswith("{"): continue
    r = json.loads(line)
    test = ("pp%d" % r["n_prompt"]) if r["n_gen"] == 0 else ("tg%d" % r["n_gen"])
    if r.get("n_depth"): test += "@d%d" % r["n_depth"]
    ts = r.get("samples_ts") or [r["avg_ts"]]
    out = {"engine": "llama.cpp", "llama_cpp": "native build " + r.get("build_commit", "?"),
           "test": test, "tok_s": statistics.median(ts), "threads": r["n_threads"],
           "file": sys.argv[1], "round": int(sys.argv[2])}
    if test.startswith("tg"): out["membw_readings_gb_s"] = [float(sys.argv[3]), float(sys.argv[4])]
    print(json.dumps(out))' "$1" "$2" "$before" "$after" <<<"$lines"
    return
  fi
  node "$here/llamacpp_bench.mjs" --peer-dir "$peer_dir" -m "$1" -t "$threads" -p "$n_prompt" -n "$n_gen" "${depth_args[@]}" -r "$reps" $fa 2>/dev/null |
    python3 -c 'import json,sys; [print(json.dumps(dict(r, file=sys.argv[1], round=int(sys.argv[2])))) for r in json.load(sys.stdin)]' "$1" "$2"
}
for f in "${files[@]}"; do
  for ((round = 0; round < rounds; ++round)); do
    echo "  $(basename "$f") round $((round + 1))/$rounds" >&2
    if (( round % 2 == 0 )); then
      run_lumen "$f" "$round" >>"$out"
      run_llama "$f" "$round" >>"$out"
    else
      run_llama "$f" "$round" >>"$out"
      run_lumen "$f" "$round" >>"$out"
    fi
  done
done
echo "after: $(uptime)"
echo "raw results: $out"

python3 - "$out" <<'EOF'
import json, statistics, sys, os
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(xs): return statistics.median(xs) if xs else float("nan")
files = []
for r in rows:
    if r["file"] not in files: files.append(r["file"])
tests = []
for r in rows:
    if r["test"] not in tests: tests.append(r["test"])
llama = next((r.get("llama_cpp", "") for r in rows if r.get("engine") == "llama.cpp"), "")
peer = "native" if llama.startswith("native") else "node-llama-cpp prebuilt CPU libs"
print(f"\nlumen vs llama.cpp ({llama}, {peer}), {rows[0]['threads']} threads, medians")
def rng(xs): return f"[{min(xs):.1f}-{max(xs):.1f}]" if xs else ""
print(f"{'model':<28} {'test':<13} {'lumen tok/s':>12} {'range':>15} {'llama.cpp':>10} {'range':>15} {'ratio':>7}   GB/s (% of the membw read during lumen's runs, around llama.cpp's)")
for f in files:
    for t in tests:
        lu = [r for r in rows if r["file"] == f and r["test"] == t and r["engine"] == "lumen"]
        ll = [r for r in rows if r["file"] == f and r["test"] == t and r["engine"] == "llama.cpp"]
        if not lu and not ll: continue
        a = med([r["tok_s"] for r in lu]); b = med([r["tok_s"] for r in ll])
        bw = ""
        gbs = [r["gb_s"] for r in lu if r.get("gb_s")]
        pct = [r["pct_bandwidth"] for r in lu if r.get("pct_bandwidth")]
        # lumen's roof: its runs' readings weighted by decode time (lumen bench --membw-every),
        # else the highest reading
        mem = [med(r["roof_gb_s_runs"]) if r.get("roof_gb_s_runs") else r["membw_gb_s"] for r in lu if r.get("membw_gb_s")]
        if gbs and pct: bw = f"{med(gbs):.1f} ({med(pct):.0f}% of {med(mem):.1f})"
        # The peer reads the same weights a token (lumen's count for the file), set against
        # the highest reading around its own run.
        bpt = [r["weight_bytes_per_token"] for r in rows if r["file"] == f and r.get("weight_bytes_per_token")]
        lpct = [r["tok_s"] * bpt[0] / 1e9 / max(r["membw_readings_gb_s"]) * 100
                for r in ll if bpt and r.get("membw_readings_gb_s")]
        if lpct:
            lmem = [max(r["membw_readings_gb_s"]) for r in ll if r.get("membw_readings_gb_s")]
            bw += f"   llama.cpp {b * bpt[0] / 1e9:.1f} ({med(lpct):.0f}% of {med(lmem):.1f})"
        ra = rng([r["tok_s"] for r in lu]); rb = rng([r["tok_s"] for r in ll])
        print(f"{os.path.basename(f):<28} {t:<13} {a:>12.1f} {ra:>15} {b:>10.1f} {rb:>15} {a / b if b == b and b > 0 else float('nan'):>6.2f}x   {bw}")
print(f"\n{'model':<28} {'lumen load ms':>14} {'peak RSS MiB':>13}   {'llama.cpp load ms':>17} {'peak RSS MiB (- node)':>22}")
for f in files:
    lu = [r for r in rows if r["file"] == f and r["engine"] == "lumen"]
    ll = [r for r in rows if r["file"] == f and r["engine"] == "llama.cpp"]
    ll = [r for r in ll if "load_ms" in r]  # llama-bench does not report them
    lrss = med([r["peak_rss_mib"] - r.get("baseline_rss_mib", 0) for r in ll])
    print(f"{os.path.basename(f):<28} {med([r['load_ms'] for r in lu]):>14.0f} {med([r['peak_rss_mib'] for r in lu]):>13.0f}   "
          f"{med([r['load_ms'] for r in ll]):>17.0f} {lrss:>22.0f}")
EOF
