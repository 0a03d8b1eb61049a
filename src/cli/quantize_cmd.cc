// lumen quantize: a model (GGUF, Hugging Face directory or llama2.c checkpoint) -> a GGUF
// with quantized weight matrices that lumen and llama.cpp load (see convert/quantize.h).
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>

#include "base/mapped_file.h"
#include "calib/awq.h"
#include "cli/common.h"
#include "cli/convert_cmds.h"
#include "cli/progress_bar.h"
#include "convert/imatrix_file.h"
#include "convert/quantize.h"

namespace lumen::cli {

namespace {

std::string mix_names() {
  std::string names;
  for (const convert::QuantMix& m : convert::quant_mixes()) names += (names.empty() ? "" : ", ") + std::string(m.name);
  return names;
}

}  // namespace

int cmd_quantize(int argc, char** argv, int first) {
  ArgParser args("quantize", "lumen quantize IN OUT.gguf --type TYPE [--imatrix FILE]",
                 {
                     {{"--type"}, "TYPE", "llama-quantize's types: " + mix_names() + " (q3_k, q4_k, q5_k: the _m mixes)"},
                     {{"--imatrix"}, "FILE", "importance matrix: llama-imatrix's imatrix.dat or the imatrix.gguf newer llama.cpp writes (`lumen imatrix` writes either)"},
                     {{"--awq"}, "TEXT", "activation-aware scaling: search per-channel scales on this calibration text"},
                     {{"--awq-ctx"}, "N", "tokens per calibration chunk for --awq (default 512)"},
                     {{"--awq-chunks"}, "N", "calibration chunks for --awq at most (default 16)"},
                     {{"--pure"}, "", "every quantized tensor gets the type's base type (no per-tensor mix rules)"},
                     {{"--output-type"}, "TYPE", "type of the output matrix (default: the mix's choice)"},
                     {{"--token-embd-type"}, "TYPE", "type of token_embd.weight (default: the mix's choice)"},
                     {{"--allow-requantize"}, "", "requantize weights that are already quantized (lossy)"},
                     {{"-t", "--threads"}, "N", "threads (default: all cores)"},
                     {{"--tensors"}, "", "list every tensor with its input and output type"},
                     {{"-v", "--verbose"}, "", "verbose logging"},
                 });
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    return 2;
  };
  if (args.positional().size() != 2)
    return fail("expected IN and OUT.gguf (lumen quantize IN OUT.gguf --type TYPE), got " +
                std::to_string(args.positional().size()) + " arguments");
  const auto type = args.get("--type");
  if (!type) return fail("missing --type TYPE (" + mix_names() + ")");
  convert::QuantizeOptions opt;
  Result<convert::TypeRules> rules =
      convert::make_type_rules(*type, args.get_or("--output-type", ""), args.get_or("--token-embd-type", ""));
  if (!rules.ok()) return fail(rules.message());
  opt.rules = *rules;
  opt.rules.pure = args.has("--pure");
  opt.allow_requantize = args.has("--allow-requantize");
  const int64_t n_cores = std::max(1u, std::thread::hardware_concurrency());
  Result<int64_t> threads = args.get_int("--threads", n_cores, 1, 1024);
  if (!threads.ok()) return fail(threads.message());
  opt.n_threads = static_cast<int>(*threads);
  convert::Imatrix imatrix;
  if (auto path = args.get("--imatrix")) {
    Result<convert::Imatrix> m = convert::read_imatrix(*path);
    if (!m.ok()) return fail("--imatrix: " + m.message());
    imatrix = std::move(*m);
    opt.imatrix = &imatrix;
    opt.imatrix_path = *path;
  }
  ProgressBar progress(stderr);
  opt.progress = &progress;
  calib::AwqResult awq;
  if (auto awq_text_path = args.get("--awq")) {
    auto text = read_text_file(*awq_text_path);
    if (!text.ok()) return fail("--awq: " + text.message());
    calib::AwqRunOptions ao;
    Result<int64_t> ctx = args.get_int("--awq-ctx", 512, 16, 1 << 20);
    Result<int64_t> chunks = args.get_int("--awq-chunks", 16, 1, 1 << 20);
    if (!ctx.ok()) return fail(ctx.message());
    if (!chunks.ok()) return fail(chunks.message());
    ao.n_ctx = static_cast<int32_t>(*ctx);
    ao.max_chunks = *chunks;
    ao.n_threads = opt.n_threads;
    ao.search.imatrix = opt.imatrix;
    ao.search.progress = &progress;
    convert::TypeRules awq_rules = opt.rules;
    awq_rules.has_imatrix = opt.imatrix != nullptr;
    calib::AwqRunReport ar;
    Result<calib::AwqResult> r = calib::awq_from_text(args.positional()[0], *text, awq_rules, ao, &ar);
    if (!r.ok()) return fail(r.message());
    awq = std::move(*r);
    int n_scaled = 0;
    double plain = 0, best = 0;
    for (const calib::AwqGroupResult& g : awq.groups) {
      n_scaled += g.alpha > 0;
      plain += g.err_plain;
      best += g.err_best;
    }
    std::fprintf(stderr, "awq: %lld chunks of %lld tokens; %d of %zu groups scaled; output error on the sample %.4g -> %.4g\n",
                 static_cast<long long>(ar.n_chunks), static_cast<long long>(ao.n_ctx), n_scaled, awq.groups.size(),
                 plain, best);
    if (args.has("--verbose"))
      for (const calib::AwqGroupResult& g : awq.groups)
        std::fprintf(stderr, "  %-28s alpha %.2f  error %.4g -> %.4g\n", g.norm.c_str(), g.alpha, g.err_plain, g.err_best);
    opt.awq = &awq.scales;
  }

  const std::string& in_path = args.positional()[0];
  const std::string& out_path = args.positional()[1];
  const auto t0 = std::chrono::steady_clock::now();
  convert::QuantizeReport report;
  Status st = convert::quantize_model(in_path, out_path, opt, &report);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::map<std::string, std::pair<int, uint64_t>> by_type;  // output type -> (count, bytes)
  for (const convert::TensorReport& t : report.tensors) {
    auto& e = by_type[std::string(dtype_name(t.to))];
    ++e.first;
    e.second += t.n_bytes;
    if (args.has("--tensors")) {
      std::string shape;
      for (int64_t d : t.ne) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      std::printf("  %-32s [%s] %s -> %s\n", t.name.c_str(), shape.c_str(), std::string(dtype_name(t.from)).c_str(),
                  std::string(dtype_name(t.to)).c_str());
    }
  }
  std::string types;
  for (const auto& [name, e] : by_type)
    types += (types.empty() ? "" : ", ") + name + " " + std::to_string(e.first);
  std::printf("lumen quantize: %s (%s, %s) -> %s (%s)\n", in_path.c_str(), report.container.c_str(),
              report.arch.c_str(), out_path.c_str(), std::string(opt.rules.mix->name).c_str());
  std::printf("  %zu tensors (%s), %.2f MiB -> %.2f MiB, %.1f s\n", report.tensors.size(), types.c_str(),
              report.n_bytes_in / 1048576.0, report.file_bytes / 1048576.0, secs);
  std::printf("  tokenizer: %s\n", report.tokenizer.c_str());
  if (opt.imatrix) {
    int n_used = 0;
    for (const convert::TensorReport& t : report.tensors) n_used += t.used_imatrix;
    std::printf("  imatrix: %s (%zu entries, %d chunks): %d tensors quantized with it", args.get_or("--imatrix", "").c_str(),
                imatrix.entries.size(), imatrix.n_chunks, n_used);
    if (!report.no_imatrix_entry.empty())
      std::printf(", %zu without (no entry: %s%s)", report.no_imatrix_entry.size(), report.no_imatrix_entry[0].c_str(),
                  report.no_imatrix_entry.size() > 1 ? ", ..." : "");
    std::printf("\n");
  }
  if (report.permuted_qk) std::printf("  q/k rows permuted from the NeoX (HF) to the interleaved RoPE layout\n");
  if (report.dropped_tied_output) std::printf("  tied embeddings: output.weight not written (token_embd.weight is the output)\n");
  return 0;
}

}  // namespace lumen::cli
