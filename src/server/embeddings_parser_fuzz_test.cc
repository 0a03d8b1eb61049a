// parse_embeddings_request against hostile bodies: mutations of valid requests (values
// swapped for other JSON types and extremes, bytes flipped, inserted, deleted, truncated).
// Each must give a clean result: inputs within the limits, or an invalid-argument error
// naming a field. Runs under ASan (the suite name contains "Fuzz").
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/request_parser.h"

namespace lumen::server {
namespace {

using Json = nlohmann::json;

Json random_value(std::mt19937_64& rng) {
  switch (rng() % 10) {
    case 0: return nullptr;
    case 1: return static_cast<int64_t>(rng()) >> (rng() % 64);
    case 2: return -1;
    case 3: return 1e300;
    case 4: return "";
    case 5: return std::string(1 + rng() % 40, 'x');
    case 6: return Json::array({1, 2, static_cast<int64_t>(rng() % 1000)});
    case 7: return Json::array({"a", Json::array({1, 2}), nullptr});
    case 8: return Json::array({Json::array({1}), Json::array({static_cast<int64_t>(rng() % 600) - 50})});
    default: return Json::object({{"k", "v"}});
  }
}

std::string mutate(const std::string& seed, std::mt19937_64& rng) {
  static const char* kKeys[] = {"input", "model", "encoding_format", "dimensions", "user"};
  std::string s;
  if (rng() % 2) {
    Json j = Json::parse(seed);
    for (int op = 0; op < 1 + static_cast<int>(rng() % 3); ++op) {
      const char* key = kKeys[rng() % std::size(kKeys)];
      if (rng() % 4 == 0) {
        j.erase(key);
      } else if (rng() % 3 == 0 && j["input"].is_array() && !j["input"].empty()) {
        j["input"][rng() % j["input"].size()] = random_value(rng);
      } else {
        j[key] = random_value(rng);
      }
    }
    s = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  } else {
    s = seed;
  }
  if (rng() % 2)
    for (int op = 0; op < 1 + static_cast<int>(rng() % 4) && !s.empty(); ++op) {
      const size_t pos = rng() % s.size();
      switch (rng() % 4) {
        case 0: s[pos] = static_cast<char>(rng()); break;
        case 1: s.insert(pos, 1, "{}[]\",:0-\x80"[rng() % 11]); break;
        case 2: s.erase(pos, 1 + rng() % 8); break;
        default: s.resize(pos); break;
      }
    }
  return s;
}

TEST(ServerEmbeddingsParserFuzz, MutatedBodiesGiveCleanResults) {
  ParserLimits limits;
  limits.n_vocab = 512;
  limits.n_ctx = 64;
  const std::vector<std::string> seeds = {
      R"({"input": "The cat sat.", "model": "m", "encoding_format": "float"})",
      R"({"input": ["a", "b", "c"], "encoding_format": "base64", "dimensions": 64, "user": "u"})",
      R"({"input": [1, 2, 3, 4]})",
      R"({"input": [[1, 2], [3], [4, 5, 6]]})",
  };
  std::mt19937_64 rng(17);
  int n_ok = 0, n_rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string body = mutate(seeds[i % seeds.size()], rng);
    SCOPED_TRACE(body.substr(0, 200));
    auto r = parse_embeddings_request(body, limits);
    if (!r.ok()) {
      ++n_rejected;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      const Json j = Json::parse(api_error_json(api_error_from_status(r.status())), nullptr, false);
      ASSERT_TRUE(j.is_object());
      continue;
    }
    ++n_ok;
    ASSERT_FALSE(r->inputs.empty());
    EXPECT_LE(r->inputs.size(), static_cast<size_t>(kMaxEmbeddingInputs));
    for (const EmbeddingInput& in : r->inputs) {
      if (!in.is_ids) {
        EXPECT_FALSE(in.text.empty());
        continue;
      }
      EXPECT_FALSE(in.ids.empty());
      EXPECT_LE(static_cast<int64_t>(in.ids.size()), limits.n_ctx);
      for (int32_t id : in.ids) EXPECT_TRUE(id >= 0 && id < limits.n_vocab);
    }
    EXPECT_GE(r->dimensions, 0);
  }
  EXPECT_GT(n_ok, 200);
  EXPECT_GT(n_rejected, 500);
}

}  // namespace
}  // namespace lumen::server
