// `lumen serve` as an operator runs it (issue 18, acceptance 3 and 4): a second server on a
// taken port exits non-zero naming the port; SIGTERM during 32 streams drains (readiness
// false first, every stream ends with [DONE], exit 0 within --drain-timeout even with
// slow-header clients connected); a second signal exits at once.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "base/cpu_affinity.h"
#include "serve_process.h"
#include "server/server_test_util.h"

namespace lumen::testing {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Requests the server has taken in: running + waiting + finished (any outcome), from /metrics.
double requests_taken(int port) {
  httplib::Client cli("127.0.0.1", port);
  auto r = cli.Get("/metrics");
  if (!r || r->status != 200) return 0;
  double n = 0;
  std::istringstream in(r->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("lumen_num_requests_running ", 0) == 0 || line.rfind("lumen_num_requests_waiting ", 0) == 0 ||
        line.rfind("lumen_requests_total{", 0) == 0)
      n += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return n;
}

TEST(ServeLifecycle, SecondServerOnATakenPortExitsNamingThePort) {
  ServeProcess first({"-m", tiny_model(), "--port", "0", "-t", "1", "--max-batch-tokens", "64"});
  const int port = first.wait_for_port();
  ASSERT_GT(port, 0) << first.log();
  ServeProcess second({"-m", tiny_model(), "--port", std::to_string(port), "-t", "1", "--max-batch-tokens", "64"});
  const int code = second.wait_exit(20);
  EXPECT_NE(code, 0) << second.log();
  EXPECT_NE(code, -1) << "still running: " << second.log();
  EXPECT_NE(second.log().find(std::to_string(port)), std::string::npos) << second.log();
  EXPECT_NE(second.log().find("in use"), std::string::npos) << second.log();
  EXPECT_TRUE(first.wait_ready(port)) << "the first server still serves";
  EXPECT_EQ(first.terminate(), 0);
}

TEST(ServeLifecycle, SigtermDrainsThirtyTwoStreamsWithSlowHeaderClientsConnected) {
  constexpr double kDrainS = 4;
  ServeProcess serve({"-m", tiny_model(), "--port", "0", "-t", "1", "-c", "16384", "--max-seqs", "8",
                      "--max-batch-tokens", "64", "--drain-timeout", std::to_string(kDrainS)});
  const int port = serve.wait_for_port();
  ASSERT_GT(port, 0) << serve.log();
  ASSERT_TRUE(serve.wait_ready(port)) << serve.log();

  // Clients that send a request head a byte at a time and never finish it.
  std::vector<std::unique_ptr<server::testing::RawConnection>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<server::testing::RawConnection>(port));
    slow.back()->send("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nX-Slow: ");
  }
  // 24 short streams finish inside the drain; 8 long ones (16000 tokens) are still running
  // (or waiting) at its deadline and must end with an error event and [DONE]. The long ones
  // are sent once the server has taken in the short ones: admission is first come, first
  // served, and long streams admitted first would hold the sequence slots for the whole drain.
  std::vector<StreamResult> results(32);
  std::vector<std::thread> clients;
  auto start = [&](int i) {
    clients.emplace_back([&, i] {
      results[i] = stream_completion(port, i < 24 ? 96 : 16000, "Once upon a time, story " + std::to_string(i));
    });
  };
  for (int i = 0; i < 24; ++i) start(i);
  for (const double t0 = now_s(); requests_taken(port) < 24 && now_s() - t0 < 20;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (int i = 24; i < 32; ++i) start(i);

  // Readiness, polled on fresh connections: what it said after SIGTERM, in order.
  std::mutex mu;
  std::vector<int> after_term;  // guarded by mu: statuses (0: no connection)
  std::atomic<bool> term_sent{false}, stop_poll{false};
  std::thread poller([&] {
    while (!stop_poll) {
      const bool after = term_sent.load();
      httplib::Client cli("127.0.0.1", port);
      cli.set_connection_timeout(5, 0);  // a busy machine may take a while; a refusal is immediate
      auto r = cli.Get("/health/ready");
      if (!r) r = cli.Get("/health/ready");  // once more: a closed listener refuses again at once, a
                                             // slow accept under load (seen at load 6) gets through
      if (after) {
        std::lock_guard<std::mutex> lock(mu);
        after_term.push_back(r ? r->status : 0);
        if (!r) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  // All 32 must be inside the server before the signal: a request that reached it only after
  // SIGTERM would rightly get the drain's 503 (seen once under load with a fixed 500 ms wait).
  // The highest count seen is what says so: one /metrics scrape is not a consistent snapshot,
  // and a short stream that finishes between the running gauge and the finished counter
  // makes the sum dip (read 32, then 29, in one run).
  double taken = 0;
  for (const double t0 = now_s(); (taken = std::max(taken, requests_taken(port))) < 32 && now_s() - t0 < 20;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GE(taken, 32) << serve.log();
  for (auto& c : slow) c->send("a");
  const double t_term = now_s();
  term_sent = true;
  serve.signal(SIGTERM);
  const int code = serve.wait_exit(kDrainS + 10);
  const double t_exit = now_s();
  stop_poll = true;
  poller.join();
  for (auto& t : clients) t.join();

  EXPECT_EQ(code, 0) << serve.log();
  EXPECT_LE(t_exit - t_term, kDrainS + 0.5) << "exit within the drain timeout";
  int n_completed = 0, n_ended = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const StreamResult& r = results[i];
    SCOPED_TRACE("stream " + std::to_string(i));
    EXPECT_EQ(r.status, 200);
    EXPECT_TRUE(r.done) << "every stream ends with [DONE]";
    EXPECT_TRUE(r.finished != r.error_event) << "completed, or ended with an error event";
    if (i < 24) {
      EXPECT_TRUE(r.finished) << "the short streams complete during the drain";
    }
    n_completed += r.finished;
    n_ended += r.error_event;
  }
  EXPECT_EQ(n_completed + n_ended, 32);
  EXPECT_GE(n_ended, 1) << "some long stream was still running at the deadline";
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_FALSE(after_term.empty());
  size_t first_not_ok = 0;
  while (first_not_ok < after_term.size() && after_term[first_not_ok] == 200) ++first_not_ok;
  ASSERT_LT(first_not_ok, after_term.size());
  EXPECT_EQ(after_term[first_not_ok], 503) << "readiness said 503 before the listener went away";
  EXPECT_NE(serve.log().find("draining"), std::string::npos) << serve.log();
}

TEST(ServeLifecycle, SecondSignalExitsAtOnce) {
  // 16000 tokens: still running 300 ms after the signal even on a fast machine.
  ServeProcess serve({"-m", tiny_model(), "--port", "0", "-t", "1", "-c", "16384", "--max-batch-tokens", "64",
                      "--drain-timeout", "60"});
  const int port = serve.wait_for_port();
  ASSERT_GT(port, 0) << serve.log();
  ASSERT_TRUE(serve.wait_ready(port)) << serve.log();
  std::thread client([&] { stream_completion(port, 16000, "Once upon a time"); });
  for (const double t0 = now_s(); requests_taken(port) < 1 && now_s() - t0 < 20;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GE(requests_taken(port), 1) << "the stream is inside the server before the signal";
  serve.signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(serve.wait_exit(0.01), -1) << "still draining after the first signal";
  const double t0 = now_s();
  serve.signal(SIGINT);
  const int code = serve.wait_exit(5);
  EXPECT_LT(now_s() - t0, 1.0);
  EXPECT_EQ(code, 128 + SIGINT) << serve.log();
  client.join();
}

// --cpus pins every thread of the server (checked in /proc for each of them); a CPU it
// may not use, or a NUMA node that does not exist, is an error naming the flag.
TEST(ServeLifecycle, CpusPinsEveryThread) {
  const std::vector<int> all = allowed_cpus();
  const std::string cpu = std::to_string(all.back());
  ServeProcess serve({"-m", tiny_model(), "--port", "0", "--cpus", cpu, "--max-batch-tokens", "64"});
  const int port = serve.wait_for_port();
  ASSERT_GT(port, 0) << serve.log();
  ASSERT_TRUE(serve.wait_ready(port)) << serve.log();
  EXPECT_NE(serve.log().find("pinned to CPUs " + cpu + " (1 compute threads)"), std::string::npos) << serve.log();
  const std::string task_dir = "/proc/" + std::to_string(serve.pid()) + "/task";
  int n_threads = 0;
  for (const auto& entry : std::filesystem::directory_iterator(task_dir)) {
    const std::string status = read_file(entry.path().string() + "/status");
    EXPECT_NE(status.find("Cpus_allowed_list:\t" + cpu + "\n"), std::string::npos) << entry.path();
    ++n_threads;
  }
  EXPECT_GE(n_threads, 3);  // main, the engine, the HTTP I/O thread, workers
  EXPECT_EQ(serve.terminate(), 0);
  ServeProcess bad({"-m", tiny_model(), "--port", "0", "--cpus", "1023"});
  EXPECT_EQ(bad.wait_exit(10), 2);
  EXPECT_NE(bad.log().find("--cpus: CPU 1023 is not available"), std::string::npos) << bad.log();
  ServeProcess no_node({"-m", tiny_model(), "--port", "0", "--numa-node", "999"});
  EXPECT_EQ(no_node.wait_exit(10), 2);
  EXPECT_NE(no_node.log().find("--numa-node: there is no NUMA node 999"), std::string::npos) << no_node.log();
}

}  // namespace
}  // namespace lumen::testing
