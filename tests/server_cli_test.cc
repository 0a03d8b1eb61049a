// `lumen serve` and `lumen bench serve` as a user runs them: the binary listens on a free
// port, answers /health, takes load from `lumen bench serve --json`, and exits cleanly on
// SIGTERM. (The HTTP API itself is tested in-process by lumen_server_tests.)
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "base/shared_dir.h"
#include "run_lumen.h"
#include "serve_process.h"

extern char** environ;

namespace lumen::testing {
namespace {

CmdResult run(const std::string& cmd) { return run_shell(cmd + " 2>&1"); }

TEST(ServerCli, ServeBenchAndShutDown) {
  ServeProcess serve({"-m", tiny_model(), "--port", "0", "-t", "1", "-c", "256", "--max-seqs", "4",
                      "--api-key", "test-key"});
  ASSERT_TRUE(serve.started());
  const int port = serve.wait_for_port();
  ASSERT_GT(port, 0) << serve.log();
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(5, 0);
  bool ready = false;
  // Up to 30 s: before it loads, serve measures bandwidth and peak rates (a few seconds on
  // a busy machine) to choose its token budget per step.
  for (int i = 0; i < 1500 && !ready; ++i) {
    auto r = cli.Get("/health");
    ready = r && r->status == 200;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(ready) << serve.log();
  // No --max-batch-tokens: the default came from the prefill knee, and serve says so.
  EXPECT_NE(serve.log().find("max-seqs 4 + prompt chunk max(prefill knee"), std::string::npos) << serve.log();
  auto denied = cli.Post("/v1/completions", R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 401);

  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  CmdResult bench = run("'" + lumen_bin() + "' bench serve --url " + url +
                        " --api-key test-key --concurrency 1,2 --requests 4 --prompt-tokens 16 --max-tokens 4 --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.out;
  std::vector<nlohmann::json> levels;
  size_t pos = 0;
  while (pos < bench.out.size()) {
    size_t eol = bench.out.find('\n', pos);
    if (eol == std::string::npos) eol = bench.out.size();
    const std::string line = bench.out.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty()) levels.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  ASSERT_EQ(levels.size(), 2u) << bench.out;
  for (const nlohmann::json& j : levels) {
    ASSERT_TRUE(j.is_object()) << bench.out;
    std::set<std::string> keys;
    for (const auto& [k, v] : j.items()) keys.insert(k);
    EXPECT_EQ(keys, (std::set<std::string>{"output_tok_s", "req_s", "goodput_req_s", "n_ok", "n_failed",
                                           "cached_token_ratio", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}));
    EXPECT_EQ(j["n_ok"], 4);
    EXPECT_EQ(j["n_failed"], 0);
    EXPECT_GT(j["output_tok_s"].get<double>(), 0);
  }
  CmdResult table = run("'" + lumen_bin() + "' bench serve --url " + url +
                        " --api-key test-key --concurrency 2 --requests 2 --prompt-tokens 8 --max-tokens 2");
  EXPECT_EQ(table.exit_code, 0) << table.out;
  EXPECT_NE(table.out.find("TTFT p50/90/99"), std::string::npos) << table.out;

  EXPECT_EQ(serve.terminate(), 0) << serve.log();
}

TEST(ServerCli, BenchServeRefusesRemoteHostsAndBadFlags) {
  CmdResult r = run("'" + lumen_bin() + "' bench serve --url http://10.1.2.3:8080 --requests 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("loopback"), std::string::npos) << r.out;
  r = run("'" + lumen_bin() + "' bench serve --concurrency 0");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  r = run("'" + lumen_bin() + "' serve -m " + tiny_model() + " --kv-memory lots");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--kv-memory"), std::string::npos) << r.out;
}

TEST(ServerCli, ServeReportsAModelThatDoesNotLoad) {
  ServeProcess serve({"-m", "/nonexistent/model.gguf", "--port", "0"});
  ASSERT_TRUE(serve.started());
  ASSERT_GT(serve.wait_for_port(), 0) << serve.log();  // it listened before loading
  int exit_code = -1;
  for (int i = 0; i < 500; ++i) {
    if (serve.log().find("error:") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  exit_code = serve.terminate();
  EXPECT_EQ(exit_code, 1) << serve.log();
  EXPECT_NE(serve.log().find("error:"), std::string::npos);
}

}  // namespace
}  // namespace lumen::testing
