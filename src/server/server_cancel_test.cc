// A client that hangs up cancels its request at once: streaming (noticed on write or by the
// connection probe), non-streaming while running, and while still waiting in the queue.
// "At once" is checked by the request not running to its max_tokens and its KV blocks
// being back in the pool.
#include <gtest/gtest.h>

#include <thread>

#include "server/server_test_util.h"

namespace lumen::server::testing {
namespace {

// Long generations (16000 tokens at a 16384 context) so a request is still running when its
// client goes, on a busy machine and on a fast one (the tiny model decodes ~15k tokens/s alone).
constexpr int kLongTokens = 16000;

std::string long_request(bool stream) {
  Json j = {{"prompt", "Once upon a time"}, {"max_tokens", kLongTokens}, {"temperature", 0}, {"ignore_eos", true}};
  if (stream) j["stream"] = true;
  return j.dump();
}

class ServerCancel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TestServerOptions o;
    o.n_ctx = 16384;
    o.max_seqs = 1;  // so a second request waits in the queue
    server_ = TestServer::start(o).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ASSERT_TRUE(idle());
  }
  static bool idle() {
    return wait_until([] {
      return metric(*server_, "lumen_kv_blocks_used") == 0 && metric(*server_, "lumen_num_requests_running") == 0 &&
             metric(*server_, "lumen_num_requests_waiting") == 0;
    });
  }
  static double cancelled() { return metric(*server_, "lumen_requests_total{outcome=\"cancelled\"}"); }
  static double generated() { return metric(*server_, "lumen_generation_tokens_total"); }
  static TestServer* server_;
};
TestServer* ServerCancel::server_ = nullptr;

TEST_F(ServerCancel, StreamingClientHangsUp) {
  const double cancelled0 = cancelled(), generated0 = generated();
  SseReply r = post_stream(*server_, "/v1/completions", long_request(true), /*max_events=*/3);
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(wait_until([&] { return cancelled() == cancelled0 + 1; }, 5)) << "the request was not cancelled";
  EXPECT_TRUE(idle()) << "blocks in use: " << metric(*server_, "lumen_kv_blocks_used");
  EXPECT_LT(generated() - generated0, kLongTokens);
}

TEST_F(ServerCancel, WholeResponseClientHangsUpWhileRunning) {
  const double cancelled0 = cancelled(), generated0 = generated();
  {
    RawConnection conn(server_->port);
    ASSERT_TRUE(conn.ok());
    ASSERT_TRUE(conn.send_post("/v1/completions", long_request(false)));
    ASSERT_TRUE(wait_until([] { return metric(*server_, "lumen_num_requests_running") == 1; }, 5));
  }  // hangs up
  EXPECT_TRUE(wait_until([&] { return cancelled() == cancelled0 + 1; }, 5)) << "the request was not cancelled";
  EXPECT_TRUE(idle());
  EXPECT_LT(generated() - generated0, kLongTokens);
}

TEST_F(ServerCancel, ClientHangsUpWhileQueued) {
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streaming" : "whole response");
    const double cancelled0 = cancelled();
    // The one sequence slot is taken by a long streaming request, cancelled by its own hang-up
    // once the checks are done.
    RawConnection runner(server_->port);
    ASSERT_TRUE(runner.ok());
    ASSERT_TRUE(runner.send_post("/v1/completions", long_request(true)));
    ASSERT_TRUE(wait_until([] { return metric(*server_, "lumen_num_requests_running") == 1; }, 5));
    {
      RawConnection conn(server_->port);
      ASSERT_TRUE(conn.ok());
      ASSERT_TRUE(conn.send_post("/v1/completions", long_request(stream)));
      ASSERT_TRUE(wait_until([] { return metric(*server_, "lumen_num_requests_waiting") == 1; }, 5));
    }
    // The queued request goes while the first one is still running.
    EXPECT_TRUE(wait_until([&] { return cancelled() == cancelled0 + 1; }, 5));
    EXPECT_TRUE(wait_until([] { return metric(*server_, "lumen_num_requests_waiting") == 0; }, 5));
    EXPECT_EQ(metric(*server_, "lumen_num_requests_running"), 1);
    runner.hang_up();
    EXPECT_TRUE(wait_until([&] { return cancelled() == cancelled0 + 2; }, 5)) << "the runner was not cancelled";
    EXPECT_TRUE(idle());
  }
}

}  // namespace
}  // namespace lumen::server::testing
