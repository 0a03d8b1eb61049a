// End-to-end tests of the CLI's everyday habits (issue 19): --version, repeated flags,
// errors that say what to do, and `lumen cache ls | clear | prune` with its size cap.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <tuple>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/cpu_features.h"
#include "base/shared_dir.h"
#include "kernels/ops.h"
#include "run_lumen.h"

namespace lumen::testing {
namespace {

namespace fs = std::filesystem;

std::string shared(const std::string& rel) { return shared_dir() + "/" + rel; }

const std::string kTiny = "models/TinyStories-656K/TinyStories-656K-Q8_0.gguf";

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(CliVersion, PrintsVersionCommitAndKernels) {
  CmdResult r = run_lumen({"--version"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "lumen 0.")) << r.out;
  ASSERT_TRUE(contains(r.out, "(commit ")) << r.out;
  const std::string kernels = "kernels: " + std::string(kernels::kernel_table_name(kernels::best_kernel_table()));
  EXPECT_TRUE(contains(r.out, kernels)) << r.out;
  EXPECT_TRUE(contains(r.out, cpu_features().describe())) << r.out;
  // The commit is a commit of this repository (when built from a git checkout; the build
  // may be older than HEAD, so it need not be HEAD).
  const size_t at = r.out.find("(commit ") + 8;
  const std::string commit = r.out.substr(at, r.out.find_first_of("-)", at) - at);
  if (commit != "unknown") {
    EXPECT_EQ(commit.size(), 12u) << r.out;
    EXPECT_EQ(commit.find_first_not_of("0123456789abcdef"), std::string::npos) << r.out;
    EXPECT_EQ(std::system(("git -C " + sh_quote(LUMEN_SOURCE_DIR) + " cat-file -e " + commit + "^{commit} 2>/dev/null").c_str()), 0)
        << commit;
  }
}

// As in llama.cpp, the last value of a scalar flag wins.
TEST(CliFlags, LastValueOfARepeatedFlagWins) {
  for (const auto& [first, second, want] : {std::tuple{"2", "5", 5u}, std::tuple{"5", "2", 2u}}) {
    CmdResult r = run_lumen({"run", "-m", shared(kTiny), "-p", "Once upon a time", "-n", first, "--n-predict", second,
                             "--temp", "0", "--ignore-eos", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["generated_ids"].size(), want) << r.out;
  }
}

TEST(CliErrors, SafetensorsFileSaysPassTheDirectory) {
  const std::string dir = shared("models/TinyStories-656K");
  CmdResult r = run_lumen({"info", "-m", dir + "/model.safetensors"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "pass the directory")) << r.err;
  EXPECT_TRUE(contains(r.err, "-m " + dir + ")")) << r.err;
  // The directory itself loads.
  r = run_lumen({"info", "-m", dir});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(CliErrors, ContextBeyondTrainingLengthWarns) {
  // TinyStories-656K was trained at 512 tokens and states no RoPE scaling.
  CmdResult r = run_lumen({"run", "-m", shared(kTiny), "-p", "Once", "-n", "1", "-c", "1024"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "warning: -c 1024 is beyond the 512 tokens")) << r.err;
  r = run_lumen({"run", "-m", shared(kTiny), "-p", "Once", "-n", "1", "-c", "512"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.err, "warning")) << r.err;
}

// lumen chat without a terminal (stdin a pipe): multi-line input, the commands, and the
// message when the conversation outgrows the context.
TEST(CliChatCommands, MultiLineSaveLoadSystemAndContext) {
  const std::string saved = ::testing::TempDir() + "lumen_chat_cmd_" + std::to_string(getpid()) + ".json";
  const std::string bad = saved + ".bad";
  { std::ofstream(bad) << "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}"; }
  CmdResult r = run_lumen({"chat", "-m", shared(kTiny), "-n", "4", "--temp", "0", "--verbose-prompt", "--history-file", ""},
                          "/system be kind\nline one\\\nline two\n\"\"\"\nblock a\nblock b\n\"\"\"\n/save " + saved +
                              "\n/load " + bad + "\n/frob\n/stats\n/exit\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "system message set")) << r.out;
  EXPECT_TRUE(contains(r.out, "/load: " + bad + ": messages[0].role: 'robot'")) << r.out;
  EXPECT_TRUE(contains(r.out, "unknown command /frob")) << r.out;
  EXPECT_TRUE(contains(r.out, "session: 2 turn(s)")) << r.out;
  EXPECT_TRUE(contains(r.err, "--- prompt (")) << r.err;
  EXPECT_TRUE(contains(r.err, "be kind")) << r.err;  // the rendered prompt holds the system message
  std::ifstream in(saved);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  ASSERT_EQ(j["messages"].size(), 5u) << j;
  EXPECT_EQ(j["messages"][0]["role"], "system");
  EXPECT_EQ(j["messages"][1]["content"], "line one\nline two");
  EXPECT_EQ(j["messages"][3]["content"], "block a\nblock b");
  // /load restores it: the next /stats counts the loaded messages.
  r = run_lumen({"chat", "-m", shared(kTiny), "--history-file", ""}, "/load " + saved + "\n/stats\n");
  EXPECT_TRUE(contains(r.out, "loaded 5 message(s)")) << r.out;
  EXPECT_TRUE(contains(r.out, "5 message(s) |")) << r.out;
  fs::remove(saved);
  fs::remove(bad);
  // A conversation beyond the context: a message that says what to do, and the chat goes on.
  r = run_lumen({"chat", "-m", shared(kTiny), "-n", "2", "-c", "32", "--history-file", ""},
                std::string(300, 'a') + "\n/clear\nhi\n/stats\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "the context holds 32: /clear to start over")) << r.out;
  EXPECT_TRUE(contains(r.out, "session: 1 turn(s)")) << r.out;
}

// `lumen bench` with lists, as llama-bench takes them: every model runs every test at every
// thread count, and -o md prints one row per (model, test, threads).
TEST(CliBenchLists, MarkdownHasOneRowPerModelTestAndThreads) {
  const std::string stories = shared("models/stories260K/stories260K.gguf");
  CmdResult r = run_lumen({"bench", "-m", shared(kTiny), "-m", stories, "-p", "8,16", "-n", "4", "-t", "1,2", "-r", "1",
                           "-o", "md"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(r.out);
  std::string line;
  int n_table_lines = 0;
  while (std::getline(in, line)) {
    if (line.rfind("|", 0) != 0) continue;
    ++n_table_lines;
    std::vector<std::string> cells;
    std::istringstream cs(line.substr(1));
    std::string cell;
    while (std::getline(cs, cell, '|')) {
      const size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
    }
    rows.push_back(cells);
  }
  ASSERT_GE(rows.size(), 2u) << r.out;
  EXPECT_EQ(rows[0][0], "model") << r.out;
  EXPECT_EQ(rows[0][5], "threads") << r.out;
  EXPECT_EQ(rows[0][6], "test") << r.out;
  EXPECT_EQ(rows[0][7], "t/s") << r.out;
  std::set<std::tuple<std::string, std::string, std::string>> seen;
  for (size_t i = 2; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), rows[0].size()) << r.out;
    EXPECT_TRUE(seen.insert({rows[i][0], rows[i][6], rows[i][5]}).second) << "duplicate row " << i << "\n" << r.out;
    EXPECT_GT(std::stod(rows[i][7]), 0) << rows[i][7];
  }
  EXPECT_EQ(n_table_lines, 2 + 2 * 3 * 2) << r.out;  // header, rule, 2 models x 3 tests x 2 thread counts
  for (const std::string m : {"TinyStories-656K-Q8_0.gguf", "stories260K.gguf"})
    for (const std::string t : {"pp8", "pp16", "tg4"})
      for (const std::string th : {"1", "2"}) EXPECT_EQ(seen.count({m, t, th}), 1u) << m << " " << t << " " << th << "\n" << r.out;

  // jsonl: one object per line; csv: a header and one line per row; repeated -p adds to the list.
  r = run_lumen({"bench", "-m", shared(kTiny), "-p", "8", "-p", "16", "-n", "0", "-t", "1", "-r", "1", "-o", "jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream jl(r.out);
  std::vector<std::string> tests;
  while (std::getline(jl, line)) tests.push_back(nlohmann::json::parse(line)["test"].get<std::string>());
  EXPECT_EQ(tests, (std::vector<std::string>{"pp8", "pp16"})) << r.out;
  r = run_lumen({"bench", "-m", shared(kTiny), "-p", "8", "-n", "4", "-t", "1", "-r", "1", "-o", "csv"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3) << r.out;
  EXPECT_EQ(r.out.rfind("model,type,", 0), 0u) << r.out;
  // Bad lists and formats are named.
  r = run_lumen({"bench", "-m", shared(kTiny), "-t", "1,zero"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "'zero'")) << r.err;
  r = run_lumen({"bench", "-m", shared(kTiny), "-o", "xml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "'xml'")) << r.err;
}

class CliCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "lumen_cache_test_" + std::to_string(getpid());
    fs::remove_all(dir_);
    unsetenv("LUMEN_CACHE_MAX");
  }
  void TearDown() override {
    unsetenv("LUMEN_CACHE_MAX");
    fs::remove_all(dir_);
    fs::remove_all(dir_ + "-models");
  }
  // A copy of the tiny model under another name: another source file, so another cache file.
  std::string copy_of_tiny(const std::string& name) {
    fs::create_directories(dir_ + "-models");
    const std::string path = dir_ + "-models/" + name + ".gguf";
    fs::copy_file(shared(kTiny), path, fs::copy_options::overwrite_existing);
    return path;
  }
  CmdResult load(const std::string& model) { return run_lumen({"run", "-m", model, "-p", "Once", "-n", "1", "--cache-dir", dir_}); }
  std::vector<std::string> files() const {
    std::vector<std::string> v;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }
  std::string file_of(const std::string& stem) const {
    for (const std::string& f : files())
      if (f.rfind(stem + "-", 0) == 0) return dir_ + "/" + f;
    return "";
  }
  std::string dir_;
};

TEST_F(CliCache, LsShowsWhatALoadWroteAndClearRemovesIt) {
  CmdResult r = load(shared(kTiny));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string tiny_cache = file_of("TinyStories-656K-Q8_0");
  ASSERT_FALSE(tiny_cache.empty()) << r.err;
  EXPECT_TRUE(contains(r.err, "lumen: wrote ")) << r.err;
  EXPECT_TRUE(contains(r.err, tiny_cache)) << r.err;
  // A second load finds the file: no notice.
  r = load(shared(kTiny));
  EXPECT_FALSE(contains(r.err, "lumen: wrote ")) << r.err;
  const std::string other = copy_of_tiny("other");
  ASSERT_EQ(load(other).exit_code, 0);
  ASSERT_EQ(files().size(), 2u);

  r = run_lumen({"cache", "ls", "--cache-dir", dir_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, fs::canonical(shared(kTiny)).string())) << r.out;
  EXPECT_TRUE(contains(r.out, fs::canonical(other).string())) << r.out;
  EXPECT_TRUE(contains(r.out, tiny_cache)) << r.out;
  EXPECT_TRUE(contains(r.out, "2 file(s)")) << r.out;
  EXPECT_TRUE(contains(r.out, "MiB")) << r.out;

  // clear MODEL removes that model's file only; a model with none is an error.
  r = run_lumen({"cache", "clear", shared(kTiny), "--cache-dir", dir_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "removed " + tiny_cache)) << r.out;
  EXPECT_EQ(files().size(), 1u);
  EXPECT_TRUE(file_of("TinyStories-656K-Q8_0").empty());
  r = run_lumen({"cache", "clear", shared(kTiny), "--cache-dir", dir_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "no cache file")) << r.err;
  // clear without a model empties the directory.
  r = run_lumen({"cache", "clear", "--cache-dir", dir_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(files().empty());
  r = run_lumen({"cache", "ls", "--cache-dir", dir_});
  EXPECT_TRUE(contains(r.out, "0 file(s)")) << r.out;
  r = run_lumen({"cache", "frob", "--cache-dir", dir_});
  EXPECT_EQ(r.exit_code, 2);
}

// prune removes the copies no load can use again (model file deleted, or changed since the
// copy was made) and keeps the others; ls marks them.
TEST_F(CliCache, PruneRemovesTheCopiesOfGoneOrChangedModels) {
  const std::string kept = copy_of_tiny("kept"), gone = copy_of_tiny("gone"), changed = copy_of_tiny("changed");
  for (const std::string& m : {kept, gone, changed}) ASSERT_EQ(load(m).exit_code, 0);
  const std::string kept_cache = file_of("kept"), gone_cache = file_of("gone"), changed_cache = file_of("changed");
  ASSERT_FALSE(kept_cache.empty());
  ASSERT_FALSE(gone_cache.empty());
  ASSERT_FALSE(changed_cache.empty());
  CmdResult r = run_lumen({"cache", "ls", "--cache-dir", dir_});
  EXPECT_FALSE(contains(r.out, "(model")) << r.out;
  EXPECT_FALSE(contains(r.out, "prune")) << r.out;
  fs::remove(gone);
  // A new mtime is a new version of the file (the key has size, mtime, device and inode).
  fs::last_write_time(changed, fs::last_write_time(changed) - std::chrono::hours(1));
  r = run_lumen({"cache", "ls", "--cache-dir", dir_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "(model gone)")) << r.out;
  EXPECT_TRUE(contains(r.out, "(model changed since)")) << r.out;
  EXPECT_TRUE(contains(r.out, "2 of them can never be used again (lumen cache prune removes them)")) << r.out;
  r = run_lumen({"cache", "prune", "--cache-dir", dir_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "removed " + gone_cache)) << r.out;
  EXPECT_TRUE(contains(r.out, "removed " + changed_cache)) << r.out;
  EXPECT_TRUE(contains(r.out, "2 file(s) removed")) << r.out;
  EXPECT_FALSE(fs::exists(gone_cache));
  EXPECT_FALSE(fs::exists(changed_cache));
  EXPECT_TRUE(fs::exists(kept_cache));
  // The kept copy is still the one a load uses (no rebuild).
  r = load(kept);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.err, "lumen: wrote ")) << r.err;
  r = run_lumen({"cache", "prune", "--cache-dir", dir_});
  EXPECT_TRUE(contains(r.out, "0 file(s) removed")) << r.out;
}

// LUMEN_CACHE_MAX: writing a cache file evicts the least recently used others until the
// directory fits; opening a file counts as a use.
TEST_F(CliCache, CapEvictsTheLeastRecentlyUsed) {
  const std::string a = copy_of_tiny("a"), b = copy_of_tiny("b"), c = copy_of_tiny("c");
  ASSERT_EQ(load(a).exit_code, 0);
  ASSERT_EQ(load(b).exit_code, 0);
  ASSERT_EQ(load(a).exit_code, 0);  // a is now the most recently used
  const std::string a_cache = file_of("a"), b_cache = file_of("b");
  ASSERT_FALSE(a_cache.empty());
  ASSERT_FALSE(b_cache.empty());
  // Room for two files: writing c's evicts b's (older use), not a's (older write).
  setenv("LUMEN_CACHE_MAX", std::to_string(2 * fs::file_size(a_cache)).c_str(), 1);
  CmdResult r = load(c);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "removed " + b_cache)) << r.err;
  EXPECT_FALSE(fs::exists(b_cache));
  EXPECT_TRUE(fs::exists(a_cache));
  EXPECT_FALSE(file_of("c").empty());
  EXPECT_EQ(files().size(), 2u);
  fs::remove(c);
  r = run_lumen({"cache", "ls", "--cache-dir", dir_});
  EXPECT_TRUE(contains(r.out, "(LUMEN_CACHE_MAX)")) << r.out;
  EXPECT_TRUE(contains(r.out, "(model gone)")) << r.out;
  // A cap below the file in use keeps it and says so.
  setenv("LUMEN_CACHE_MAX", "1MiB", 1);
  r = load(b);
  EXPECT_TRUE(contains(r.err, "is over LUMEN_CACHE_MAX")) << r.err;
  EXPECT_EQ(files().size(), 1u);
  // A value that is not a size is named, and means no cap.
  setenv("LUMEN_CACHE_MAX", "lots", 1);
  r = run_lumen({"cache", "ls", "--cache-dir", dir_});
  EXPECT_TRUE(contains(r.err, "LUMEN_CACHE_MAX")) << r.err;
}

}  // namespace
}  // namespace lumen::testing
