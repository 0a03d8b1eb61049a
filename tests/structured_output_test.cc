// Structured output against an independent validator (issue 17, acceptance 1): a
// random-weight model with Qwen2.5's vocabulary (151,936 ids: its free output is gibberish,
// so every valid answer is the grammar's doing) samples at temperature 1.0 under each of
// the 25 JSON Schemas of tests/data/json_schemas, 10 completions each; every one of the
// 250 must parse and validate under Debian's python3-jsonschema. The test skips, saying
// so, only when python3-jsonschema is missing (scripts/setup.sh installs it).
//
// GBNF grammars (the shapes of llama.cpp's grammars/ folder, our own text in
// tests/data/gbnf): sampled outputs are checked with our parser in the suite; llama.cpp's
// llama-gbnf-validator accepted the same kind of outputs by hand (see the commit).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "run_lumen.h"

namespace lumen {
namespace {

namespace fs = std::filesystem;
using testing::run_lumen;

constexpr int kSamplesPerGrammar = 10;
constexpr int kMaxTokens = 1500;  // far above what the schemas' bounds lead to (< 100 tokens)

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::vector<fs::path> files_in(const std::string& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// A file the test binary removes when it exits.
struct TempFile {
  std::string path;
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

// A random-weight qwen2.5-shaped model small enough to decode ~1000 tokens/s, with the full
// Qwen2.5 tokenizer (from $LUMEN_SHARED), written once per test binary (and removed at its
// exit: every run used to leave a 16 MB file in the temp directory).
const std::string& random_qwen_path() {
  static const TempFile file{[] {
    const std::string out = ::testing::TempDir() + "structured_qwen_" + std::to_string(getpid()) + ".gguf";
    const testing::CmdResult r =
        run_lumen({"synth", "--preset", "qwen2.5-0.5b", "--hidden", "64", "--layers", "1", "--heads", "2",
                   "--kv-heads", "1", "--ffn", "128", "--type", "q8_0", "-t", "2", "-o", out});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  }()};
  return file.path;
}

std::unique_ptr<engine::Engine> make_engine() {
  engine::EngineConfig c;
  c.n_threads = 2;
  c.n_ctx = 2048;
  c.max_seqs = kSamplesPerGrammar;
  c.max_batch_tokens = 64;
  auto e = engine::Engine::create(random_qwen_path(), c);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(e).value() : nullptr;
}

struct Sampled {
  std::vector<std::string> texts;
  std::vector<engine::FinishReason> reasons;
};

// n completions at temperature 1.0 (no top-k / top-p / min-p: the whole masked vocabulary).
Sampled sample(engine::Engine& e, std::shared_ptr<const grammar::CompiledGrammar> g, uint64_t seed) {
  engine::Request r;
  r.prompt_ids = e.tokenizer().encode("Answer in JSON:", true, false);
  r.params.max_tokens = kMaxTokens;
  r.params.n = kSamplesPerGrammar;
  r.params.grammar = std::move(g);
  r.params.sampling.temperature = 1.0f;
  r.params.sampling.top_k = 0;
  r.params.sampling.top_p = 1.0f;
  r.params.sampling.min_p = 0.0f;
  r.params.sampling.seed = seed;
  Sampled s;
  s.texts.resize(kSamplesPerGrammar);
  s.reasons.resize(kSamplesPerGrammar, engine::FinishReason::kNone);
  auto id = e.add_request(r);
  EXPECT_TRUE(id.ok()) << id.message();
  if (!id.ok()) return s;
  while (e.has_work()) {
    for (engine::RequestEvent& ev : e.step()) {
      const auto i = static_cast<size_t>(ev.seq_index);
      s.texts[i] += ev.text_delta;
      if (ev.finished) s.reasons[i] = ev.finish_reason;
    }
  }
  return s;
}

// kEos: the model ended a complete value; kStop: the grammar allowed nothing more. Not
// kLength: the schemas' bounds end every value long before kMaxTokens.
void expect_complete(const Sampled& s, size_t i) {
  EXPECT_TRUE(s.reasons[i] == engine::FinishReason::kEos || s.reasons[i] == engine::FinishReason::kStop)
      << "completion " << i << " did not complete (" << engine::finish_reason_name(s.reasons[i])
      << "): " << s.texts[i];
}

std::shared_ptr<const grammar::CompiledGrammar> compile(engine::Engine& e, const std::string& gbnf,
                                                        const std::shared_ptr<const grammar::TokenTable>& vocab) {
  auto g = grammar::CompiledGrammar::from_gbnf(gbnf, vocab);
  EXPECT_TRUE(g.ok()) << g.message();
  return g.ok() ? *g : nullptr;
}

bool python_jsonschema_present() {
  return std::system("python3 -c 'import jsonschema' >/dev/null 2>&1") == 0;
}

// Validates every (schema, text) pair with python3-jsonschema; returns its report.
testing::CmdResult validate_with_python(const nlohmann::json& cases, const std::string& dir) {
  const std::string cases_path = dir + "cases.json", script_path = dir + "validate.py";
  std::ofstream(cases_path) << cases.dump();
  std::ofstream(script_path) << R"(import json, sys
import jsonschema
cases = json.load(open(sys.argv[1]))
bad = 0
for c in cases:
    cls = jsonschema.validators.validator_for(c["schema"])
    checker = cls(c["schema"], format_checker=cls.FORMAT_CHECKER)
    try:
        value = json.loads(c["text"])
        errors = [e.message for e in checker.iter_errors(value)]
    except ValueError as e:
        errors = ["not JSON: %s" % e]
    if errors:
        bad += 1
        print("%s #%d: %r: %s" % (c["name"], c["index"], c["text"], "; ".join(errors)))
print("validated %d, invalid %d" % (len(cases), bad))
sys.exit(1 if bad else 0)
)";
  testing::CmdResult r = testing::run_shell("python3 " + testing::sh_quote(script_path) + " " +
                                             testing::sh_quote(cases_path) + " 2>&1");
  std::error_code ec;
  fs::remove(cases_path, ec);
  fs::remove(script_path, ec);
  return r;
}

TEST(StructuredOutput, TenSamplesPerSchemaValidate) {
  if (!python_jsonschema_present())
    GTEST_SKIP() << "python3-jsonschema is not installed (scripts/setup.sh installs it): nothing to validate with";
  auto e = make_engine();
  ASSERT_TRUE(e);
  ASSERT_EQ(e->hparams().n_vocab, 151936);
  const auto vocab = grammar::TokenTable::build(e->tokenizer(), e->hparams().n_vocab);
  const std::vector<fs::path> schemas = files_in(std::string(LUMEN_TEST_DATA_DIR) + "/json_schemas", ".json");
  ASSERT_EQ(schemas.size(), 25u);
  nlohmann::json cases = nlohmann::json::array();
  uint64_t seed = 1;
  for (const fs::path& path : schemas) {
    SCOPED_TRACE(path.filename().string());
    const std::string schema_text = read_file(path);
    auto gbnf = grammar::json_schema_to_gbnf(schema_text);
    ASSERT_TRUE(gbnf.ok()) << gbnf.message();
    auto g = compile(*e, *gbnf, vocab);
    ASSERT_NE(g, nullptr);
    const Sampled s = sample(*e, g, seed++);
    for (size_t i = 0; i < s.texts.size(); ++i) {
      expect_complete(s, i);
      cases.push_back({{"name", path.filename().string()},
                       {"index", i},
                       {"schema", nlohmann::json::parse(schema_text)},
                       {"text", s.texts[i]}});
    }
  }
  ASSERT_EQ(cases.size(), 250u);
  const testing::CmdResult r = validate_with_python(cases, ::testing::TempDir() + "structured_" +
                                                               std::to_string(getpid()) + "_");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("validated 250, invalid 0"), std::string::npos) << r.out;
}

// The GBNF grammars of tests/data/gbnf: every sample completes inside its grammar, checked
// again by a fresh matcher over the text (the engine's matcher saw only token ids).
TEST(StructuredOutput, GbnfGrammarsConstrainEverySample) {
  auto e = make_engine();
  ASSERT_TRUE(e);
  const auto vocab = grammar::TokenTable::build(e->tokenizer(), e->hparams().n_vocab);
  const std::vector<fs::path> grammars = files_in(std::string(LUMEN_TEST_DATA_DIR) + "/gbnf", ".gbnf");
  ASSERT_EQ(grammars.size(), 5u);
  uint64_t seed = 100;
  for (const fs::path& path : grammars) {
    SCOPED_TRACE(path.filename().string());
    auto g = compile(*e, read_file(path), vocab);
    ASSERT_NE(g, nullptr);
    const Sampled s = sample(*e, g, seed++);
    for (size_t i = 0; i < s.texts.size(); ++i) {
      expect_complete(s, i);
      grammar::GrammarMatcher m(g);
      EXPECT_TRUE(m.accept_bytes(s.texts[i]) && m.can_end()) << "completion " << i << ": " << s.texts[i];
    }
  }
}

}  // namespace
}  // namespace lumen
