// The edge under abuse (issue 18, acceptance 5): 300 connections trickling request heads
// and 500 idle keep-alive connections stay open while 16 real streaming requests run.
// Every real request completes, their p99 time to first token stays within 2x of the same
// run without the abusers, and /health answers within 100 ms throughout. Loopback only;
// the abusers come from other 127.0.0.x addresses so the per-client limit (default 256)
// is not what protects the server here: the event loop is. A timing test: CTest runs it
// alone (*_serial_test.cc, see cmake/lumen.cmake).
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include "base/timer.h"
#include "server/server_test_util.h"

namespace lumen::server::testing {
namespace {

constexpr int kSlowHeaders = 300;
constexpr int kIdle = 500;
constexpr int kStreams = 16;

// Time to first token (ms) of one streaming completion, or -1 if it did not complete.
double stream_ttft_ms(const TestServer& s, int i) {
  auto c = s.client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = Json{{"prompt", "Once upon a time, in a small town, story number " + std::to_string(i)},
                  {"max_tokens", 48},
                  {"temperature", 0},
                  {"ignore_eos", true},
                  {"stream", true}}
                 .dump();
  req.set_header("Content-Type", "application/json");
  const double t0 = now_ms();
  double t_first = -1;
  std::string all;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    all.append(data, n);
    if (t_first < 0 && all.find("\"text\":\"") != std::string::npos &&
        all.find("\"text\":\"\"") == std::string::npos)
      t_first = now_ms();
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  if (!c->send(req, res, err) || all.find("data: [DONE]") == std::string::npos) return -1;
  return t_first < 0 ? now_ms() - t0 : t_first - t0;
}

// Two rounds of 16 concurrent streams; the p99 TTFT of the 32 (the second largest), or -1
// if any failed.
double p99_ttft_ms(const TestServer& s) {
  std::vector<double> ttft;
  for (int round = 0; round < 2; ++round) {
    std::vector<double> got(kStreams, -1);
    std::vector<std::thread> threads;
    for (int i = 0; i < kStreams; ++i) threads.emplace_back([&, i] { got[i] = stream_ttft_ms(s, i); });
    for (auto& t : threads) t.join();
    ttft.insert(ttft.end(), got.begin(), got.end());
  }
  if (std::any_of(ttft.begin(), ttft.end(), [](double v) { return v < 0; })) return -1;
  std::sort(ttft.begin(), ttft.end());
  // numpy's p99 of 32 values lies between the two largest: take the larger (conservative).
  return ttft.back();
}

void raise_fd_limit() {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_NOFILE, &r);
}

// The abusers: heads that never end (from 127.0.0.2-4), and idle keep-alive connections
// that made one request (from 127.0.0.5-9). Closed when destroyed.
struct Abusers {
  std::vector<std::unique_ptr<RawConnection>> slow, idle;

  // False if a connection could not be made or its request was not answered.
  bool open(int port) {
    for (int i = 0; i < kSlowHeaders; ++i) {
      slow.push_back(std::make_unique<RawConnection>(port, "127.0.0." + std::to_string(2 + i / 100)));
      if (!slow.back()->ok()) return false;
      slow.back()->send("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nX-Slow: ");
    }
    for (int i = 0; i < kIdle; ++i) {
      idle.push_back(std::make_unique<RawConnection>(port, "127.0.0." + std::to_string(5 + i / 100)));
      if (!idle.back()->ok()) return false;
      idle.back()->send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
    }
    for (auto& c : idle)
      if (raw_status(c->read_response()) != 200) return false;
    return true;
  }
  void trickle() {  // one more header byte on every slow connection
    for (auto& c : slow) c->send("a");
  }
};

// The 1-minute load average per core (from /proc/loadavg), or 0 if unknown.
double load_per_core() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  double load = 0;
  if (f) {
    if (std::fscanf(f, "%lf", &load) != 1) load = 0;
    std::fclose(f);
  }
  return load / std::max(1u, std::thread::hardware_concurrency());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Alternating rounds, each one p99 without the abusers and one with them connected; the
// medians of the rounds are compared, so a burst of load from outside the test (other
// processes on the machine) in one measurement does not decide it.
TEST(ServerAbuse, SlowHeadersAndIdleConnectionsDoNotHurtRealStreams) {
  constexpr int kRounds = 3;
  // Its bounds are wall-clock times on this machine: when other processes keep every core
  // busy several times over, a thread of the test or of the server can wait hundreds of
  // milliseconds for a core, and the test would measure them, not the server. It says so
  // and skips rather than pass or fail on such a measurement.
  constexpr double kMaxLoadPerCore = 2.0;
  if (const double load = load_per_core(); load > kMaxLoadPerCore)
    GTEST_SKIP() << "the machine is overloaded (load " << load << " per core, over " << kMaxLoadPerCore
                 << "): timings would measure other processes";
  raise_fd_limit();
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  if (r.rlim_cur < 2 * (kSlowHeaders + kIdle) + 256) GTEST_SKIP() << "RLIMIT_NOFILE " << r.rlim_cur << " is too low";
  TestServerOptions o;
  o.n_ctx = 512;
  o.max_seqs = 4;
  auto s = TestServer::start(o);
  ASSERT_TRUE(s);
  ASSERT_GT(p99_ttft_ms(*s), 0);  // warm-up

  // The helper threads stop and are joined however the test ends (an ASSERT returns early).
  std::atomic<bool> stop{false}, abusing{false};
  std::mutex mu;
  Abusers* current = nullptr;     // guarded by mu
  std::vector<double> health_ms;  // guarded by mu: /health latencies while abusers were connected
  int n_health_failed = 0;        // guarded by mu
  std::thread prober, trickler;
  struct Joiner {
    std::atomic<bool>& stop;
    std::thread& a;
    std::thread& b;
    ~Joiner() {
      stop = true;
      if (a.joinable()) a.join();
      if (b.joinable()) b.join();
    }
  } joiner{stop, prober, trickler};
  prober = std::thread([&] {  // /health on a fresh connection every 20 ms
    while (!stop) {
      const bool during = abusing.load();
      const double t0 = now_ms();
      RawConnection c(s->port, "127.0.0.10");
      c.send("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
      const int status = raw_status(c.read_response(2));
      const double took = now_ms() - t0;
      if (during && abusing.load()) {
        std::lock_guard<std::mutex> lock(mu);
        if (status == 200) health_ms.push_back(took);
        else ++n_health_failed;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  trickler = std::thread([&] {  // a header byte per slow connection every 200 ms
    while (!stop) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (current) current->trickle();
      }
      for (int i = 0; i < 20 && !stop; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });

  std::vector<double> base, abused;
  double open_min = 1e9;
  for (int round = 0; round < kRounds; ++round) {
    base.push_back(p99_ttft_ms(*s));
    ASSERT_GT(base.back(), 0) << "a real request failed without abusers";
    auto abusers = std::make_unique<Abusers>();
    ASSERT_TRUE(abusers->open(s->port));
    {
      std::lock_guard<std::mutex> lock(mu);
      current = abusers.get();
    }
    ASSERT_TRUE(wait_until([&] { return metric(*s, "lumen_http_connections_open") >= kSlowHeaders + kIdle; }, 5));
    abusing = true;
    abused.push_back(p99_ttft_ms(*s));
    open_min = std::min(open_min, metric(*s, "lumen_http_connections_open"));
    abusing = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      current = nullptr;
    }
    ASSERT_GT(abused.back(), 0) << "a real request failed with the abusers connected";
    abusers.reset();
    ASSERT_TRUE(wait_until([&] { return metric(*s, "lumen_http_connections_open") < 10; }, 5));
  }
  stop = true;
  trickler.join();
  prober.join();  // (the Joiner then has nothing left to do)

  EXPECT_LE(median(abused), 2 * median(base)) << "median p99 TTFT with abusers vs without";
  EXPECT_GE(open_min, kSlowHeaders + kIdle) << "the abusers were connected while the requests ran";
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(n_health_failed, 0);
  ASSERT_FALSE(health_ms.empty());
  const double worst = *std::max_element(health_ms.begin(), health_ms.end());
  EXPECT_LT(worst, 100) << "slowest /health of " << health_ms.size() << ": " << worst << " ms";
  std::string rounds;
  for (int i = 0; i < kRounds; ++i) rounds += " " + std::to_string(static_cast<int>(base[i])) + "/" + std::to_string(static_cast<int>(abused[i]));
  std::printf("p99 TTFT ms without/with %d slow-header + %d idle connections, per round:%s; /health worst %.1f ms over %zu checks\n",
              kSlowHeaders, kIdle, rounds.c_str(), worst, health_ms.size());
}

}  // namespace
}  // namespace lumen::server::testing
