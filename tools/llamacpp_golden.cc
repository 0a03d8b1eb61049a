// llamacpp_golden: teacher-forced goldens from llama.cpp for lumen's architecture tests.
//
// Not built by CMake or CI: a hand tool. It loads a GGUF through llama.cpp's public C API
// and writes the JSON of tests/data/arch/FORMAT.md ("lumen-arch-golden/1"): for each
// prompt, the prompt's token ids, the logits of every prompt position (from one batch),
// then a greedy continuation fed one token per llama_decode, with the top-k logits,
// logsumexp and top-2 margin of every row and the full logits of some rows.
//
// Compile against the llama.cpp build beside the repository (commit c392e5094):
//
//   L=/work/peer/llama.cpp
//   g++ -std=c++17 -O2 -o /tmp/llamacpp_golden tools/llamacpp_golden.cc  (one line, continued:)
//       -I$L/include -I$L/ggml/include -L$L/build/bin -lllama -lggml -lggml-base
//       -Wl,-rpath,$L/build/bin
//
// or against the llama.cpp inside node-llama-cpp 3.22.1 (for architectures c392e5094 lacks:
// qwen3, gemma3, smollm3); its sources are the git bundle in the npm package `node-llama-cpp`
// (llama/gitRelease.bundle) and its CPU libraries are in `@node-llama-cpp/linux-x64`:
//
//   N=/tmp/nlc   # npm pack both packages there, untar, `git clone llama/gitRelease.bundle src`
//   g++ -std=c++17 -O2 -o /tmp/llamacpp_golden_nlc tools/llamacpp_golden.cc  (continued:)
//       -I$N/src/include -I$N/src/ggml/include $N/bins/libllama.v0.5.0.so
//       $N/bins/libggml.v0.5.0.so $N/bins/libggml-base.so -Wl,-rpath,$N/bins
//   /tmp/llamacpp_golden_nlc --backend-dir $N/bins ...
//
// Usage:
//   llamacpp_golden -m model.gguf --prompts prompts.json -o golden.json
//       [--n-predict 24] [--top-k 8] [--full-every 24] [--n-ctx 512]
//       [--flash-attn] [--kv-type f16|f32|q8_0|q4_0] [--backend-dir DIR] [--reference-name S]
// prompts.json: [{"name": "short", "text": "Once upon a time"}, ...]
//
// One thread, one sequence, no sampling randomness: the output is a function of the file,
// the prompts and the options (two runs give byte-identical files).
#include <llama.h>
#include <ggml-backend.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

// llama.h after the llama_memory API (2025-06 onwards) defines these state flags; the
// c392e5094 header does not.
#ifdef LLAMA_STATE_SEQ_FLAGS_NONE
#define GOLDEN_NEW_API 1
#else
#define GOLDEN_NEW_API 0
#endif

namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "llamacpp_golden: %s\n", msg.c_str());
  std::exit(1);
}

struct Options {
  std::string model_path, prompts_path, out_path, backend_dir, reference_name;
  int n_predict = 24;
  int top_k = 8;
  int full_every = 24;
  int n_ctx = 512;
  bool flash_attn = false;
  std::string kv_type = "f16";
};

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    auto next_int = [&](int lo, int hi) {
      const std::string v = next();
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || x < lo || x > hi) die(a + ": '" + v + "' is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      return static_cast<int>(x);
    };
    if (a == "-m") o.model_path = next();
    else if (a == "--prompts") o.prompts_path = next();
    else if (a == "-o") o.out_path = next();
    else if (a == "--n-predict") o.n_predict = next_int(1, 4096);
    else if (a == "--top-k") o.top_k = next_int(2, 64);
    else if (a == "--full-every") o.full_every = next_int(0, 1 << 20);
    else if (a == "--n-ctx") o.n_ctx = next_int(16, 1 << 20);
    else if (a == "--flash-attn") o.flash_attn = true;
    else if (a == "--kv-type") o.kv_type = next();
    else if (a == "--backend-dir") o.backend_dir = next();
    else if (a == "--reference-name") o.reference_name = next();
    else die("unknown argument '" + a + "' (see the comment at the top of tools/llamacpp_golden.cc)");
  }
  if (o.model_path.empty() || o.prompts_path.empty() || o.out_path.empty()) die("need -m MODEL --prompts FILE -o OUT");
  return o;
}

ggml_type kv_ggml_type(const std::string& name) {
  if (name == "f16") return GGML_TYPE_F16;
  if (name == "f32") return GGML_TYPE_F32;
  if (name == "q8_0") return GGML_TYPE_Q8_0;
  if (name == "q4_0") return GGML_TYPE_Q4_0;
  die("--kv-type: '" + name + "' is not f16, f32, q8_0 or q4_0");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// SHA-256 (FIPS 180-4), for the model object's checksum.
std::string sha256_hex(const std::string& data) {
  static const uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string m = data;
  const uint64_t bit_len = static_cast<uint64_t>(data.size()) * 8;
  m.push_back(static_cast<char>(0x80));
  while (m.size() % 64 != 56) m.push_back('\0');
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<char>((bit_len >> (8 * i)) & 0xff));
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t off = 0; off < m.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (uint32_t(uint8_t(m[off + 4 * i])) << 24) | (uint32_t(uint8_t(m[off + 4 * i + 1])) << 16) |
             (uint32_t(uint8_t(m[off + 4 * i + 2])) << 8) | uint32_t(uint8_t(m[off + 4 * i + 3]));
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  char out[65];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", h[i]);
  return std::string(out, 64);
}

// %.6g, as the shared goldens write floats (FORMAT.md §2).
json num6(double v) {
  if (!std::isfinite(v)) die("a logit is not finite");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return json::parse(buf);
}

std::string meta(const llama_model* model, const char* key) {
  char buf[256];
  const int32_t n = llama_model_meta_val_str(model, key, buf, sizeof buf);
  return n < 0 ? std::string() : std::string(buf);
}

struct Row {
  int32_t pos = 0;
  int32_t input_id = 0;  // the token evaluated at pos (whose logits these are)
  std::vector<float> logits;
};

// One logits row as FORMAT.md describes it: argmax, top-2 margin, logsumexp (double over
// the float32 logits), the top-k as [id, logit] (logit descending, then id ascending).
json row_json(const Row& r, int top_k, bool full, const char* phase) {
  const int32_t n = static_cast<int32_t>(r.logits.size());
  std::vector<int32_t> order(n);
  for (int32_t i = 0; i < n; ++i) order[i] = i;
  std::partial_sort(order.begin(), order.begin() + std::min(top_k, n), order.end(), [&](int32_t a, int32_t b) {
    return r.logits[a] != r.logits[b] ? r.logits[a] > r.logits[b] : a < b;
  });
  double mx = -INFINITY;
  for (float v : r.logits) mx = std::max(mx, static_cast<double>(v));
  double s = 0;
  for (float v : r.logits) s += std::exp(static_cast<double>(v) - mx);
  json j;
  j["phase"] = phase;
  j["pos"] = r.pos;
  j["input_id"] = r.input_id;
  j["argmax"] = order[0];
  j["margin"] = num6(static_cast<double>(r.logits[order[0]]) - r.logits[order[1]]);
  j["logsumexp"] = num6(mx + std::log(s));
  json top = json::array();
  for (int i = 0; i < std::min(top_k, n); ++i) top.push_back(json::array({order[i], num6(r.logits[order[i]])}));
  j["top"] = top;
  if (full) {
    json all = json::array();
    for (float v : r.logits) all.push_back(num6(v));
    j["logits"] = all;
  }
  return j;
}

class Runner {
 public:
  Runner(llama_model* model, const Options& o) : model_(model), o_(o) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(o.n_ctx);
    cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(o.n_ctx);
    cp.n_threads = cp.n_threads_batch = 1;
    cp.type_k = cp.type_v = kv_ggml_type(o.kv_type);
#if GOLDEN_NEW_API
    cp.flash_attn_type = o.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.swa_full = true;  // keep every cell: the math is the same, and nothing is pruned under us
#else
    cp.flash_attn = o.flash_attn;
#endif
    ctx_ = llama_init_from_model(model, cp);
    if (!ctx_) die("llama_init_from_model failed (a quantized V cache needs --flash-attn)");
    n_vocab_ = llama_vocab_n_tokens(llama_model_get_vocab(model));
  }
  ~Runner() { llama_free(ctx_); }

  void clear() {
#if GOLDEN_NEW_API
    llama_memory_clear(llama_get_memory(ctx_), true);
#else
    llama_kv_cache_clear(ctx_);
#endif
  }

  // Evaluates ids at positions pos0.. in one llama_decode; returns the logits of every
  // position (all_rows) or of the last.
  std::vector<Row> decode(const std::vector<int32_t>& ids, int32_t pos0, bool all_rows) {
    llama_batch b = llama_batch_init(static_cast<int32_t>(ids.size()), 0, 1);
    for (size_t i = 0; i < ids.size(); ++i) {
      b.token[i] = ids[i];
      b.pos[i] = pos0 + static_cast<int32_t>(i);
      b.n_seq_id[i] = 1;
      b.seq_id[i][0] = 0;
      b.logits[i] = all_rows || i + 1 == ids.size();
    }
    b.n_tokens = static_cast<int32_t>(ids.size());
    if (llama_decode(ctx_, b) != 0) die("llama_decode failed");
    std::vector<Row> rows;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!b.logits[i]) continue;
      const float* l = llama_get_logits_ith(ctx_, static_cast<int32_t>(i));
      if (!l) die("llama_get_logits_ith returned null");
      rows.push_back(Row{pos0 + static_cast<int32_t>(i), ids[i], std::vector<float>(l, l + n_vocab_)});
    }
    llama_batch_free(b);
    return rows;
  }

  int32_t n_vocab() const { return n_vocab_; }

 private:
  llama_model* model_;
  const Options& o_;
  llama_context* ctx_ = nullptr;
  int32_t n_vocab_ = 0;
};

std::vector<int32_t> tokenize(const llama_vocab* vocab, const std::string& text, bool add_special) {
  std::vector<int32_t> ids(text.size() + 8);
  int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                             static_cast<int32_t>(ids.size()), add_special, false);
  if (n < 0) {
    ids.resize(-n);
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                       static_cast<int32_t>(ids.size()), add_special, false);
  }
  if (n < 0) die("tokenize failed");
  ids.resize(n);
  return ids;
}

json run_prompt(Runner& runner, const llama_vocab* vocab, const Options& o, const json& prompt) {
  const std::string name = prompt.at("name").get<std::string>();
  const std::string text = prompt.at("text").get<std::string>();
  const bool add_bos = llama_vocab_get_add_bos(vocab);
  const std::vector<int32_t> ids = tokenize(vocab, text, add_bos);
  if (ids.empty()) die("prompt '" + name + "' has no tokens");
  if (static_cast<int>(ids.size()) + o.n_predict > o.n_ctx) die("prompt '" + name + "' + --n-predict exceeds --n-ctx");

  json p;
  p["name"] = name;
  p["text"] = text;
  p["prompt_ids"] = ids;
  p["n_prompt"] = ids.size();
  json rows = json::array();
  runner.clear();
  // The prompt: one batch, logits at every position.
  std::vector<Row> prompt_rows = runner.decode(ids, 0, true);
  const int32_t last_prompt_pos = static_cast<int32_t>(ids.size()) - 1;
  auto is_full = [&](int32_t pos, bool last) {
    return last || (o.full_every > 0 && pos % o.full_every == o.full_every - 1);
  };
  for (const Row& r : prompt_rows) rows.push_back(row_json(r, o.top_k, is_full(r.pos, r.pos == last_prompt_pos), "prompt"));
  // Greedy continuation, one token per llama_decode: step i's token is the argmax of the
  // previous row (lowest id on ties) and is evaluated at position n_prompt + i.
  std::vector<int32_t> generated;
  Row last = prompt_rows.back();
  for (int i = 0; i < o.n_predict; ++i) {
    int32_t best = 0;
    for (int32_t v = 1; v < runner.n_vocab(); ++v)
      if (last.logits[v] > last.logits[best]) best = v;
    generated.push_back(best);
    if (i + 1 == o.n_predict) break;
    last = runner.decode({best}, last_prompt_pos + 1 + i, false).back();
    rows.push_back(row_json(last, o.top_k, is_full(last.pos, i + 2 == o.n_predict), "decode"));
  }
  p["generated_ids"] = generated;
  p["rows"] = rows;
  return p;
}

// The JSON with one line per logits row (diffable, and a few hundred KiB at most).
void write_golden(std::ostream& out, const json& g) {
  out << "{\n";
  bool first = true;
  for (const auto& [key, value] : g.items()) {
    out << (first ? "" : ",\n") << json(key).dump() << ": ";
    first = false;
    if (key != "prompts") {
      out << value.dump();
      continue;
    }
    out << "[\n";
    for (size_t i = 0; i < value.size(); ++i) {
      const json& p = value[i];
      out << " {";
      bool first_field = true;
      for (const auto& [pkey, pvalue] : p.items()) {
        out << (first_field ? "" : ",\n  ") << json(pkey).dump() << ": ";
        first_field = false;
        if (pkey != "rows") {
          out << pvalue.dump();
          continue;
        }
        out << "[\n";
        for (size_t r = 0; r < pvalue.size(); ++r) out << "   " << pvalue[r].dump() << (r + 1 < pvalue.size() ? ",\n" : "\n");
        out << "  ]";
      }
      out << "}" << (i + 1 < value.size() ? ",\n" : "\n");
    }
    out << "]";
  }
  out << "\n}\n";
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  const json prompts = json::parse(read_file(o.prompts_path));
  if (!prompts.is_array() || prompts.empty()) die("--prompts: expected a non-empty JSON array of {name, text}");

  llama_log_set([](ggml_log_level level, const char* text, void*) {
    if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
  }, nullptr);
#if GOLDEN_NEW_API
  if (!o.backend_dir.empty()) ggml_backend_load_all_from_path(o.backend_dir.c_str());
  else ggml_backend_load_all();
#endif
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(o.model_path.c_str(), mp);
  if (!model) die("cannot load '" + o.model_path + "'");
  const llama_vocab* vocab = llama_model_get_vocab(model);

  const std::string file_bytes = read_file(o.model_path);
  json g;
  g["format"] = "lumen-arch-golden/1";
  json m;
  const std::string path = o.model_path;
  m["file"] = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  m["sha256"] = sha256_hex(file_bytes);
  m["size_bytes"] = file_bytes.size();
  m["arch"] = meta(model, "general.architecture");
  char desc[256];
  llama_model_desc(model, desc, sizeof desc);
  m["desc"] = desc;
  m["n_vocab"] = llama_vocab_n_tokens(vocab);
  m["n_ctx_train"] = llama_model_n_ctx_train(model);
  m["bos_id"] = llama_vocab_bos(vocab);
  m["eos_id"] = llama_vocab_eos(vocab);
  m["add_bos"] = llama_vocab_get_add_bos(vocab);
  g["model"] = m;
  json ref;
  ref["implementation"] = "llama.cpp";
#if GOLDEN_NEW_API
  ref["api"] = "llama_memory (2025-06 and later)";
#else
  ref["api"] = "llama_kv_cache (c392e5094 era)";
#endif
  ref["build"] = o.reference_name.empty() ? std::string("unnamed") : o.reference_name;
  ref["backend"] = "CPU (ggml-cpu), 1 thread";
  ref["system_info"] = llama_print_system_info();
  ref["harness"] = "tools/llamacpp_golden.cc";
  g["reference"] = ref;
  json s;
  s["n_ctx"] = o.n_ctx;
  s["n_threads"] = 1;
  s["flash_attn"] = o.flash_attn;
  s["kv_type"] = o.kv_type;
  s["prompt_eval"] = "one llama_decode for the whole prompt, logits at every position";
  s["decode"] = "greedy (argmax, lowest id on ties), one llama_decode per token";
  s["n_predict"] = o.n_predict;
  s["top_k"] = o.top_k;
  s["full_every"] = o.full_every;
  g["settings"] = s;

  Runner runner(model, o);
  json out_prompts = json::array();
  for (const json& p : prompts) out_prompts.push_back(run_prompt(runner, vocab, o, p));
  g["prompts"] = out_prompts;

  std::ofstream out(o.out_path, std::ios::binary);
  if (!out) die("cannot write '" + o.out_path + "'");
  write_golden(out, g);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
