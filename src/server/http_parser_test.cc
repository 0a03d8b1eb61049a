// The HTTP request parser: valid requests in every byte split, pipelining, chunked bodies,
// and every refusal with its status (the transport answers them at once). The fuzz test
// (HttpParserFuzz, run under ASan by `make test`) feeds mutated and random bytes in random
// splits and checks the parser's own invariants.
#include "server/http_parser.h"

#include <gtest/gtest.h>

#include <random>

namespace lumen::server {
namespace {

struct Outcome {
  HttpRequestParser::State state;
  HttpRequest request;
  HttpParseError error;
  size_t used = 0;
};

// Feeds `text` in pieces of at most `piece` bytes until the parser finishes.
Outcome parse(std::string_view text, size_t piece = 1 << 20, HttpLimits limits = {}) {
  HttpRequestParser p(limits);
  Outcome o;
  while (o.used < text.size() && p.state() == HttpRequestParser::State::kNeedMore)
    o.used += p.feed(text.substr(o.used, std::min(piece, text.size() - o.used)));
  o.state = p.state();
  if (o.state == HttpRequestParser::State::kComplete) o.request = p.take();
  if (o.state == HttpRequestParser::State::kError) o.error = p.error();
  return o;
}

int status_of(std::string_view text, HttpLimits limits = {}) {
  const Outcome o = parse(text, 1 << 20, limits);
  if (o.state == HttpRequestParser::State::kError) return o.error.status;
  return o.state == HttpRequestParser::State::kComplete ? 0 : -1;  // 0: accepted, -1: wants more
}

const std::string kPost =
    "POST /v1/completions?x=1 HTTP/1.1\r\nHost: localhost:8080\r\nContent-Type: application/json\r\n"
    "Content-Length: 13\r\n\r\n{\"prompt\":\"a\"}";

TEST(HttpParser, CompleteRequestInEverySplit) {
  const std::string text = kPost.substr(0, kPost.size() - 1);  // 13 bytes of body: {"prompt":"a"
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    const Outcome o = parse(text, piece);
    ASSERT_EQ(o.state, HttpRequestParser::State::kComplete) << "piece " << piece << ": " << o.error.message;
    EXPECT_EQ(o.request.method, "POST");
    EXPECT_EQ(o.request.target, "/v1/completions?x=1");
    EXPECT_EQ(o.request.path, "/v1/completions");
    EXPECT_EQ(o.request.body, "{\"prompt\":\"a\"");
    EXPECT_EQ(o.request.header_value("content-TYPE"), "application/json");
    EXPECT_EQ(o.request.header_value("Host"), "localhost:8080");
    EXPECT_EQ(o.used, text.size());
  }
}

TEST(HttpParser, PipelinedRequestsAndKeepAlive) {
  const std::string two = "GET /health HTTP/1.1\r\nHost: a\r\n\r\nGET /metrics HTTP/1.0\r\n\r\n";
  HttpRequestParser p(HttpLimits{});
  const size_t used = p.feed(two);
  ASSERT_EQ(p.state(), HttpRequestParser::State::kComplete);
  EXPECT_TRUE(p.keep_alive());
  EXPECT_EQ(p.take().path, "/health");
  EXPECT_EQ(p.state(), HttpRequestParser::State::kNeedMore);
  EXPECT_FALSE(p.started());
  p.feed(std::string_view(two).substr(used));
  ASSERT_EQ(p.state(), HttpRequestParser::State::kComplete);
  EXPECT_FALSE(p.keep_alive());  // HTTP/1.0 without keep-alive
  EXPECT_EQ(p.take().path, "/metrics");
  // Connection: close on 1.1; keep-alive on 1.0; bare LF line ends; leading empty lines.
  HttpRequestParser q(HttpLimits{});
  q.feed("\r\n\nGET / HTTP/1.1\nHost: a\nConnection: close\n\n");
  ASSERT_EQ(q.state(), HttpRequestParser::State::kComplete) << q.error().message;
  EXPECT_FALSE(q.keep_alive());
  q.take();
  q.feed("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
  ASSERT_EQ(q.state(), HttpRequestParser::State::kComplete);
  EXPECT_TRUE(q.keep_alive());
}

TEST(HttpParser, ChunkedBody) {
  const std::string text =
      "POST /tokenize HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;ext=1\r\n{\"con\r\n"
      "A\r\ntent\": \"hi\r\n"
      "2\r\n\"}\r\n"
      "0\r\nX-Trailer: t\r\n\r\n";
  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, text.size()}) {
    const Outcome o = parse(text, piece);
    ASSERT_EQ(o.state, HttpRequestParser::State::kComplete) << o.error.message;
    EXPECT_EQ(o.request.body, "{\"content\": \"hi\"}");
    EXPECT_FALSE(o.request.has_header("transfer-encoding"));
    EXPECT_EQ(o.request.header_value("content-length"), "17");
    EXPECT_EQ(o.used, text.size());
  }
  HttpLimits small;
  small.max_body_bytes = 8;
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\naaaaa\r\n5\r\n", small), 413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n"), 413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n"), 400);
}

// Refused at the head, with the status the transport answers at once.
TEST(HttpParser, BadContentLengthIsRefusedAtOnce) {
  auto with = [](const std::string& headers) { return "POST / HTTP/1.1\r\nHost: a\r\n" + headers + "\r\n"; };
  EXPECT_EQ(status_of(with("Content-Length: -1\r\n")), 400);
  EXPECT_EQ(status_of(with("Content-Length: abc\r\n")), 400);
  EXPECT_EQ(status_of(with("Content-Length: 1e3\r\n")), 400);
  EXPECT_EQ(status_of(with("Content-Length: +5\r\n")), 400);
  EXPECT_EQ(status_of(with("Content-Length: \r\n")), 400);
  EXPECT_EQ(status_of(with("Content-Length: 5\r\nContent-Length: 6\r\n")), 400);
  EXPECT_EQ(status_of(with("Content-Length: 5, 6\r\n")), 400);
  EXPECT_EQ(status_of(with("Content-Length: 99999999999999999999999999\r\n")), 413);
  EXPECT_EQ(status_of(with("Content-Length: 4194305\r\n")), 413);  // 4 MiB + 1
  EXPECT_EQ(status_of(with("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n")), 400);
  EXPECT_EQ(status_of(with("Transfer-Encoding: gzip, chunked\r\n")), 501);
  EXPECT_EQ(status_of(with("Transfer-Encoding: chunked, gzip\r\n")), 400);
  EXPECT_EQ(status_of(with("Expect: something\r\n")), 417);
  // Agreeing repeats and leading zeros are fine; the body is then due.
  EXPECT_EQ(status_of(with("Content-Length: 5, 5\r\n")), -1);
  EXPECT_EQ(status_of(with("Content-Length: 000000000000000000000000005\r\n")), -1);
  EXPECT_EQ(status_of(with("Content-Length: 0\r\n")), 0);
}

TEST(HttpParser, MalformedHeads) {
  EXPECT_EQ(status_of("GET /\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET  / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET http://x/ HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
  EXPECT_EQ(status_of("G@T / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/2.0\r\nHost: a\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET / FTP/1.0\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\n\r\n"), 400);                       // no Host
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);  // two
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n folded\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x7f\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: a\r\nno colon\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\rb\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(status_of("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"), 0);
}

TEST(HttpParser, SizeLimits) {
  EXPECT_EQ(status_of("GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n"), 414);
  std::string many = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 101; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(status_of(many + "\r\n"), 431);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(40000, 'v') + "\r\n"), 431);
  // An endless run of empty lines is a head too.
  EXPECT_EQ(status_of(std::string(40000, '\n')), 431);
  // Limits are checked before the end of the line arrives.
  HttpRequestParser p(HttpLimits{});
  p.feed("GET /" + std::string(9000, 'a'));
  EXPECT_EQ(p.state(), HttpRequestParser::State::kError);
  EXPECT_EQ(p.error().status, 414);
}

TEST(HttpParser, ExpectContinue) {
  HttpRequestParser p(HttpLimits{});
  p.feed("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  EXPECT_TRUE(p.wants_continue());
  p.feed("abc");
  EXPECT_FALSE(p.wants_continue());
  EXPECT_EQ(p.state(), HttpRequestParser::State::kComplete);
}

// Random and mutated inputs in random splits: the parser never crashes (ASan checks the
// memory), a completed body never exceeds the limit, an error always has a 4xx/5xx status
// and a message, and it never consumes more than it was given.
TEST(HttpParserFuzz, MutatedAndRandomBytes) {
  const std::vector<std::string> seeds = {
      kPost,
      "GET /health HTTP/1.1\r\nHost: a\r\n\r\n",
      "POST /tokenize HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
  };
  const std::string alphabet = "\r\n :;,0123456789abcdefABCDEF-\t\x00\x7f\xff/HTTP";
  std::mt19937 rng(12345);
  HttpLimits limits;
  limits.max_body_bytes = 64;
  limits.max_head_bytes = 512;
  limits.max_line_bytes = 128;
  limits.max_headers = 8;
  int n_complete = 0, n_error = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string text = seeds[rng() % seeds.size()];
    const int n_mut = 1 + static_cast<int>(rng() % 6);
    for (int m = 0; m < n_mut && !text.empty(); ++m) {
      const size_t pos = rng() % text.size();
      switch (rng() % 4) {
        case 0: text[pos] = alphabet[rng() % alphabet.size()]; break;
        case 1: text.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
        case 2: text.erase(pos, 1 + rng() % 4); break;
        default: text.insert(pos, text.substr(rng() % text.size(), rng() % 16)); break;
      }
    }
    if (iter % 10 == 0) {  // pure noise
      text.resize(rng() % 300);
      for (char& c : text) c = static_cast<char>(rng());
    }
    HttpRequestParser p(limits);
    size_t used = 0;
    while (used < text.size() && p.state() == HttpRequestParser::State::kNeedMore) {
      const size_t piece = 1 + rng() % 17;
      const std::string_view chunk = std::string_view(text).substr(used, std::min(piece, text.size() - used));
      const size_t n = p.feed(chunk);
      ASSERT_LE(n, chunk.size());
      if (n == 0 && p.state() == HttpRequestParser::State::kNeedMore) FAIL() << "no progress";
      used += n;
    }
    if (p.state() == HttpRequestParser::State::kComplete) {
      ++n_complete;
      const HttpRequest r = p.take();
      ASSERT_LE(static_cast<int64_t>(r.body.size()), limits.max_body_bytes);
      ASSERT_FALSE(r.method.empty());
      ASSERT_TRUE(r.path == "*" || (!r.path.empty() && r.path[0] == '/'));
    } else if (p.state() == HttpRequestParser::State::kError) {
      ++n_error;
      ASSERT_GE(p.error().status, 400);
      ASSERT_LT(p.error().status, 600);
      ASSERT_FALSE(p.error().message.empty());
    }
  }
  // The mutations must reach both ends, or the test is not testing much.
  EXPECT_GT(n_complete, 1000);
  EXPECT_GT(n_error, 1000);
}

}  // namespace
}  // namespace lumen::server
