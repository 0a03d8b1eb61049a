// lumen imatrix: an importance matrix from calibration text, as llama-imatrix makes one
// (calib/imatrix_collect.h; the file is llama.cpp's format, which llama-quantize --imatrix
// and lumen quantize --imatrix read). The text is cut into chunks as llama-perplexity does
// (calib/chunks.h) and the perplexity of the chunks is printed along the way.
#include <cmath>
#include <cstdio>

#include "base/mapped_file.h"
#include "calib/chunks.h"
#include "calib/imatrix_collect.h"
#include "cli/calib_cmds.h"
#include "cli/common.h"
#include "cli/progress_bar.h"
#include "convert/imatrix_file.h"

namespace lumen::cli {

int cmd_imatrix(int argc, char** argv, int first) {
  std::vector<OptionSpec> specs = engine_option_specs();
  specs.push_back({{"-f", "--file"}, "PATH", "calibration text"});
  specs.push_back({{"-o", "--output"}, "PATH", "importance matrix to write (default imatrix.dat; a name ending in .gguf gets the GGUF form newer llama.cpp writes)"});
  specs.push_back({{"--chunks"}, "N", "use at most N chunks of the text (default: all)"});
  ArgParser args("imatrix", "lumen imatrix -m MODEL -f TEXT [-o imatrix.dat] [-c 512] [--chunks N]", specs);
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  auto fail = calib_fail;
  auto config = engine_config_from_args(args);
  if (!config.ok()) return fail(config.message(), 2);
  auto max_chunks = args.get_int("--chunks", -1, 1, 1 << 30);  // default: all
  if (!max_chunks.ok()) return fail(max_chunks.message(), 2);
  const auto text_path = args.get("--file");
  if (!text_path) return fail("missing -f/--file TEXT (the calibration text)", 2);
  const std::string out_path = args.get_or("--output", "imatrix.dat");
  auto text = read_text_file(*text_path);
  if (!text.ok()) return fail("--file: " + text.message(), 2);

  engine::EngineConfig c = *config;
  if (c.n_ctx <= 0) c.n_ctx = 512;
  if (c.n_ctx < 16) return fail("-c must be at least 16 for imatrix (smaller passes are not collected)", 2);
  set_chunk_batch(args, c);
  std::unique_ptr<engine::Engine> eng = load_engine_or_report(args, c);
  if (!eng) return 1;
  const std::vector<int32_t> tokens = eng->tokenizer().encode(*text, true, false);
  const int64_t n_ctx = c.n_ctx;
  if (static_cast<int64_t>(tokens.size()) < 2 * n_ctx)
    return fail("the text has " + std::to_string(tokens.size()) + " tokens; imatrix needs at least 2 chunks (" +
                    std::to_string(2 * n_ctx) + " tokens at -c " + std::to_string(n_ctx) + ")",
                1);
  const int64_t n_chunks = calib::count_chunks(static_cast<int64_t>(tokens.size()), n_ctx, *max_chunks);

  calib::ImatrixCollector collector(eng->model().file());
  if (collector.n_matrices() == 0) return fail("the model has no layer matrices to collect for", 1);
  eng->set_model_tap([&](std::string_view name, int32_t il, int32_t expert_idx, std::span<const float> v) {
    collector.on_tap(name, il, expert_idx, v);
  });
  std::fprintf(stderr, "imatrix: %zu tokens, %lld chunks of %lld, %zu matrices\n", tokens.size(),
               static_cast<long long>(n_chunks), static_cast<long long>(n_ctx), collector.n_matrices());
  ProgressBar progress(stderr);
  progress.start("imatrix", static_cast<uint64_t>(n_chunks), "chunks");
  double nll = 0;
  int64_t count = 0;
  calib::ChunkObserver obs;
  obs.on_chunk_done = [&](int64_t chunk_idx, double nll_sum, int64_t n_scored) {
    nll += nll_sum;
    count += n_scored;
    progress.update(static_cast<uint64_t>(chunk_idx + 1), "ppl " + std::to_string(std::exp(nll / count)));
  };
  Status st = calib::run_chunks(*eng, tokens, n_ctx, n_chunks, obs);
  progress.finish();
  eng->set_model_tap(nullptr);
  if (!st.ok()) return fail(st.message(), 1);
  const convert::Imatrix m = collector.result(static_cast<int32_t>(n_chunks), *text_path);
  const bool gguf = out_path.ends_with(".gguf");
  // As llama-imatrix: an expert weight some expert of which met no calibration token is
  // left out of the .dat form (kept in the GGUF form, with that expert's count 0).
  for (const std::string& name : collector.partial())
    std::fprintf(stderr, "imatrix: warning: some experts of %s got no token%s\n", name.c_str(),
                 gguf ? "" : " - left out of the file (more text, or -o NAME.gguf, keeps it)");
  st = gguf ? convert::write_imatrix_gguf(out_path, collector.sums(), *text_path, static_cast<int32_t>(n_chunks),
                                          static_cast<int32_t>(n_ctx))
            : convert::write_imatrix(out_path, m);
  if (!st.ok()) return fail(st.message(), 1);
  std::printf("lumen imatrix: %s, %lld chunks of %lld tokens (ppl %.4f) -> %s (%zu entries)\n", text_path->c_str(),
              static_cast<long long>(n_chunks), static_cast<long long>(n_ctx), std::exp(nll / count), out_path.c_str(),
              m.entries.size());
  return 0;
}

}  // namespace lumen::cli
