// lumen embed: text -> its embedding, through the same engine request as the server's
// /v1/embeddings (GenerationParams::embed): prints the vector as one JSON array.
#include <cstdio>
#include <string>

#include "cli/common.h"
#include "engine/engine.h"

namespace lumen::cli {

int cmd_embed(int argc, char** argv, int first) {
  std::vector<OptionSpec> specs = engine_option_specs();
  specs.push_back({{"-p", "--prompt"}, "TEXT", "the text to embed"});
  specs.push_back({{"--pooling"}, "mean|cls|last", "pooling (default: the model's pooling_type; last for decoder LLMs)"});
  ArgParser args("embed", "lumen embed -m MODEL -p TEXT [--pooling mean|cls|last]", specs);
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  const auto text = args.get("--prompt");
  if (!text || text->empty()) {
    std::fprintf(stderr, "error: give the text with -p TEXT\n");
    return 2;
  }
  auto config = engine_config_from_args(args);
  if (!config.ok()) {
    std::fprintf(stderr, "error: %s\n", config.message().c_str());
    return 2;
  }
  engine::Pooling pooling = engine::Pooling::kNone;
  if (auto name = args.get("--pooling")) {
    auto p = engine::parse_pooling(*name);
    if (!p.ok()) {
      std::fprintf(stderr, "error: --pooling: %s\n", p.message().c_str());
      return 2;
    }
    pooling = *p;
  }
  config->enable_embeddings = true;
  std::unique_ptr<engine::Engine> eng = load_engine_or_report(args, *config);
  if (!eng) return 1;
  if (pooling == engine::Pooling::kNone) {
    auto p = engine::model_pooling(eng->hparams());
    if (!p.ok()) {
      std::fprintf(stderr, "error: %s\n", p.message().c_str());
      return 1;
    }
    pooling = *p;
  }
  engine::Request r;
  r.prompt_ids = eng->tokenizer().encode(*text, /*add_special=*/true, /*parse_special=*/true);
  r.params.max_tokens = 0;
  r.params.embed = pooling;
  if (auto id = eng->add_request(std::move(r)); !id.ok()) {
    std::fprintf(stderr, "error: %s\n", id.message().c_str());
    return 1;
  }
  std::vector<float> embedding;
  while (eng->has_work())
    for (engine::RequestEvent& ev : eng->step()) {
      if (ev.finish_reason == engine::FinishReason::kError) {
        std::fprintf(stderr, "error: %s\n", ev.error.c_str());
        return 1;
      }
      if (!ev.embedding.empty()) embedding = std::move(ev.embedding);
    }
  std::string out = "[";
  char buf[32];
  for (size_t i = 0; i < embedding.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.9g", i ? ", " : "", embedding[i]);
    out += buf;
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fprintf(stderr, "lumen embed: %zu dimensions, %s pooling\n", embedding.size(), engine::pooling_name(pooling));
  return 0;
}

}  // namespace lumen::cli
