// llama.cpp's pp / tg rates on a GGUF file, measured the way `lumen bench` measures lumen,
// through the prebuilt CPU libraries of node-llama-cpp (bench/vs_llamacpp.sh installs them
// outside the repository; nothing of llama.cpp is in this repository).
//
//   node bench/llamacpp_bench.mjs --peer-dir DIR -m MODEL.gguf [-t 2] [-p 512] [-n 128]
//        [-d 4096] [-r 3] [--fa]
//
// Prints a JSON array like `lumen bench --json`: {"test", "tok_s", "tok_s_min", "tok_s_max",
// "threads", "model", "engine": "llama.cpp", "llama_cpp", "load_ms" (model + context),
// "peak_rss_mib" (whole node process), "baseline_rss_mib" (node + libraries before the
// model: peak - baseline is what the model and its context added)}.
//
// How it times (node-llama-cpp 3.x exposes llama_decode through a context sequence, not
// llama-bench itself):
//   context   n_ctx = max(p, d + n + 2), n_batch = n_ubatch = 512, `threads` = -t (ideal
//             and minimum), f16 KV cache, flash attention off unless --fa, mmap on.
//   ppN       the sequence is cleared, then N random token ids are evaluated with
//             evaluateWithoutGeneratingNewTokens (one llama_decode of N tokens); the time of
//             that call. One untimed warm-up run first.
//   tgN       the sequence is cleared (and, for -d D, D random tokens are evaluated,
//             untimed); then a greedy generation (temperature 0, EOS/EOG yielded and
//             ignored) from one random token: the time from the first generated token to
//             the (N+1)-th, i.e. N single-token llama_decode steps, each with its greedy
//             sampling, as lumen's tgN counts.
// Each test runs -r times; the median is reported with min and max.
import {pathToFileURL} from "node:url";
import {basename, join} from "node:path";

function parseArgs(argv) {
  const o = {peerDir: "", model: "", threads: 2, nPrompt: 512, nGen: 128, depth: 0, reps: 3, fa: false};
  for (let i = 2; i < argv.length; ++i) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`missing value after ${a}`);
      return argv[++i];
    };
    if (a === "--peer-dir") o.peerDir = next();
    else if (a === "-m" || a === "--model") o.model = next();
    else if (a === "-t" || a === "--threads") o.threads = Number(next());
    else if (a === "-p" || a === "--n-prompt") o.nPrompt = Number(next());
    else if (a === "-n" || a === "--n-gen") o.nGen = Number(next());
    else if (a === "-d" || a === "--depth") o.depth = Number(next());
    else if (a === "-r" || a === "--repetitions") o.reps = Number(next());
    else if (a === "--fa") o.fa = true;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!o.peerDir || !o.model) throw new Error("usage: llamacpp_bench.mjs --peer-dir DIR -m MODEL.gguf [...]");
  return o;
}

// Deterministic random token ids (xorshift), like lumen bench's fixed seeds.
function randomTokens(n, nVocab, seed) {
  let s = BigInt(seed) * 0x9E3779B97F4A7C15n + 1n;
  const out = new Array(n);
  for (let i = 0; i < n; ++i) {
    s ^= s << 13n; s &= (1n << 64n) - 1n;
    s ^= s >> 7n;
    s ^= s << 17n; s &= (1n << 64n) - 1n;
    out[i] = Number(s % BigInt(nVocab));
  }
  return out;
}

function summary(name, rates) {
  const v = [...rates].sort((a, b) => a - b);
  const n = v.length;
  const median = n % 2 ? v[(n - 1) / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {test: name, tok_s: median, tok_s_min: v[0], tok_s_max: v[n - 1]};
}

const nowMs = () => Number(process.hrtime.bigint()) / 1e6;

async function main() {
  const o = parseArgs(process.argv);
  const lib = await import(pathToFileURL(join(o.peerDir, "node_modules/node-llama-cpp/dist/index.js")).href);
  const llama = await lib.getLlama({gpu: false, build: "never", logLevel: "error", maxThreads: o.threads});
  // Node and the loaded libraries before the model: subtracted to compare RSS with lumen.
  const baselineRssMib = process.resourceUsage().maxRSS / 1024;
  const loadT0 = nowMs();
  const model = await llama.loadModel({modelPath: o.model, gpuLayers: 0, useMmap: true});
  const nVocab = model.fileInfo?.metadata?.tokenizer?.ggml?.tokens?.length ?? 32000;
  const nCtx = Math.max(o.nPrompt, o.depth + o.nGen + 2, o.nGen + 2, 16);
  const context = await model.createContext({
    contextSize: nCtx, batchSize: 512, sequences: 1, flashAttention: o.fa,
    threads: {ideal: o.threads, min: o.threads},
  });
  const seq = context.getSequence();
  const loadMs = nowMs() - loadT0;  // model + context
  const results = [];

  if (o.nPrompt > 0) {
    const rates = [];
    for (let r = -1; r < o.reps; ++r) {  // r = -1: warm-up
      await seq.clearHistory();
      const tokens = randomTokens(o.nPrompt, nVocab, 42 + r + 1);
      const t0 = nowMs();
      await seq.evaluateWithoutGeneratingNewTokens(tokens);
      const ms = nowMs() - t0;
      if (r >= 0) rates.push(o.nPrompt / (ms / 1000));
    }
    results.push(summary(`pp${o.nPrompt}`, rates));
  }

  const runTg = async (depth) => {
    const rates = [];
    for (let r = 0; r < o.reps; ++r) {
      await seq.clearHistory();
      if (depth > 0) {
        // Filled in batches of 512 (the context's batch size), untimed.
        await seq.evaluateWithoutGeneratingNewTokens(randomTokens(depth, nVocab, 7 + r));
      }
      const first = randomTokens(1, nVocab, 1000 + r);
      let n = 0, t0 = 0, t1 = 0;
      for await (const token of seq.evaluate(first, {temperature: 0, yieldEogToken: true})) {
        void token;
        ++n;
        if (n === 1) t0 = nowMs();
        if (n === o.nGen + 1) {
          t1 = nowMs();
          break;
        }
      }
      rates.push(o.nGen / ((t1 - t0) / 1000));
    }
    results.push(summary(`tg${o.nGen}${depth > 0 ? `@d${depth}` : ""}`, rates));
  };
  if (o.nGen > 0) {
    await runTg(0);
    if (o.depth > 0) await runTg(o.depth);
  }

  const release = llama.llamaCppRelease ?? {};
  const peakRssMib = process.resourceUsage().maxRSS / 1024;
  for (const r of results) {
    r.load_ms = loadMs;
    r.peak_rss_mib = peakRssMib;
    r.baseline_rss_mib = baselineRssMib;
    r.threads = o.threads;
    r.model = basename(o.model);
    r.engine = "llama.cpp";
    r.flash_attn = o.fa;
    r.llama_cpp = `${release.repo ?? "?"}@${release.release ?? "?"}`;
  }
  console.log(JSON.stringify(results));
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

main().catch((e) => {
  console.error(`llamacpp_bench: ${e.message}`);
  process.exit(1);
});
