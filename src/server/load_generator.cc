#include "server/load_generator.h"

#include <httplib.h>

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/timer.h"

namespace lumen::server {
namespace {

using Json = nlohmann::json;

constexpr const char* kWords[] = {
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school",
    "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week",
    "company", "system", "program", "question", "work", "government", "number", "night", "point", "home",
    "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book",
    "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service", "friend",
    "father", "power", "hour", "game", "line", "end", "member", "law", "car", "city", "community", "name",
    "president", "team", "minute", "idea", "kid", "body", "information", "back", "parent", "face", "others",
    "level", "office", "door", "health", "person", "art", "war", "history", "party", "result", "change",
    "morning", "reason", "research", "girl", "guy", "moment", "air", "teacher", "force", "education",
    "foot", "boy", "age", "policy", "music", "market", "sense", "nation", "plan", "college", "interest",
    "death", "experience", "effect", "use", "class", "control", "care", "field", "development", "role",
    "effort", "rate", "heart", "drug", "show", "leader", "light", "voice", "wife", "police", "mind",
    "price", "report", "decision", "son", "view", "relationship", "town", "road", "arm", "difference",
    "value", "building", "action", "model", "season", "society", "tax", "director", "position", "player",
    "record", "paper", "space", "ground", "form", "event", "official", "matter", "center", "couple", "site",
    "project", "activity", "star", "table", "need", "court", "oil", "situation", "cost", "industry",
    "figure", "street", "image", "phone", "data", "picture", "practice", "piece", "land", "product",
    "doctor", "wall", "patient", "worker", "news", "test", "movie", "north", "love", "support", "technology",
    "step", "baby", "computer", "type", "attention", "film", "tree", "source", "organization", "hair",
    "window", "evidence", "population", "site", "garden", "river", "little", "happy", "green", "small"};

std::string random_words(std::mt19937_64& rng, int32_t n) {
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  std::string s;
  for (int32_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += kWords[pick(rng)];
  }
  return s;
}

httplib::Headers auth_headers(const LoadConfig& c) {
  httplib::Headers h;
  if (!c.api_key.empty()) h.emplace("Authorization", "Bearer " + c.api_key);
  return h;
}

std::unique_ptr<httplib::Client> make_client(const LoadConfig& c) {
  auto cli = std::make_unique<httplib::Client>(c.host, c.port);
  cli->set_connection_timeout(10, 0);
  const auto timeout_s = static_cast<time_t>(c.request_timeout_s);
  cli->set_read_timeout(timeout_s, 0);
  cli->set_write_timeout(timeout_s, 0);
  // A fresh connection per request. With keep-alive, a server that closes a connection
  // after its own limit of requests (cpp-httplib's default is 5, llama-server's) races the
  // next request sent on it, which then fails with a read error: about one request in five
  // against llama-server, a failure of the client, not of the server. A POST cannot be
  // retried blindly, and a loopback connect costs ~0.1 ms against TTFTs of 100s of ms.
  cli->set_keep_alive(false);
  // Without TCP_NODELAY the request body waits for the ACK of the headers (Nagle), and
  // the server delays that ACK: +40 ms on every TTFT.
  cli->set_tcp_nodelay(true);
  return cli;
}

// Token ids of `text` from the server's /tokenize (llama.cpp and lumen both answer
// {"tokens": [...]}); nullopt if the server has no such endpoint.
std::optional<std::vector<int32_t>> tokenize(httplib::Client& cli, const LoadConfig& c, const std::string& text) {
  Json body = {{"content", text}, {"add_special", false}};
  auto res = cli.Post("/tokenize", auth_headers(c), body.dump(), "application/json");
  if (!res || res->status != 200) return std::nullopt;
  Json j = Json::parse(res->body, nullptr, false);
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) return std::nullopt;
  std::vector<int32_t> ids;
  for (const Json& t : j["tokens"]) {
    if (t.is_number_integer()) ids.push_back(t.get<int32_t>());
    else if (t.is_object() && t.contains("id") && t["id"].is_number_integer()) ids.push_back(t["id"].get<int32_t>());
    else return std::nullopt;
  }
  return ids;
}

// Words tokenized and cut to exactly n ids (more words until there are enough).
Result<std::vector<int32_t>> token_prompt(httplib::Client& cli, const LoadConfig& c, std::mt19937_64& rng, int32_t n) {
  std::vector<int32_t> ids;
  int32_t n_words = n;
  for (int attempt = 0; attempt < 4 && static_cast<int32_t>(ids.size()) < n; ++attempt) {
    auto t = tokenize(cli, c, " " + random_words(rng, n_words));
    if (!t) return error("the server's /tokenize failed while building prompts");
    ids = std::move(*t);
    n_words *= 2;
  }
  if (static_cast<int32_t>(ids.size()) < n) return error("could not build a prompt of " + std::to_string(n) + " tokens");
  ids.resize(n);
  return ids;
}

struct Prompts {
  std::vector<Json> prompts;  // one per request: a string or an array of ids
  bool as_ids = false;
};

Result<Prompts> build_prompts(httplib::Client& cli, const LoadConfig& c) {
  std::mt19937_64 rng(c.seed);  // the shared prefixes
  std::seed_seq parts_seed{static_cast<uint32_t>(c.seed), static_cast<uint32_t>(c.seed >> 32), c.prompt_set};
  std::mt19937_64 parts_rng(parts_seed);  // the distinct parts
  Prompts p;
  p.as_ids = c.format == PromptFormat::kIds;
  if (c.format == PromptFormat::kAuto) p.as_ids = tokenize(cli, c, "hello world").has_value();
  if (p.as_ids) {
    std::vector<std::vector<int32_t>> prefixes(std::max(1, c.prefix_groups));
    if (c.shared_prefix_tokens > 0) {
      for (auto& prefix : prefixes) {
        LUMEN_ASSIGN_OR_RETURN(prefix, token_prompt(cli, c, rng, c.shared_prefix_tokens));
      }
    }
    for (int32_t i = 0; i < c.n_requests; ++i) {
      LUMEN_ASSIGN_OR_RETURN(std::vector<int32_t> ids, token_prompt(cli, c, parts_rng, c.prompt_tokens));
      const std::vector<int32_t>& prefix = prefixes[i % prefixes.size()];
      ids.insert(ids.begin(), prefix.begin(), prefix.end());
      p.prompts.emplace_back(std::move(ids));
    }
    return p;
  }
  std::vector<std::string> prefixes(std::max(1, c.prefix_groups));
  if (c.shared_prefix_tokens > 0)
    for (std::string& prefix : prefixes) prefix = random_words(rng, c.shared_prefix_tokens) + " ";
  for (int32_t i = 0; i < c.n_requests; ++i)
    p.prompts.emplace_back(prefixes[i % prefixes.size()] + random_words(parts_rng, c.prompt_tokens));
  return p;
}

std::string discover_model(httplib::Client& cli, const LoadConfig& c) {
  auto res = cli.Get("/v1/models", auth_headers(c));
  if (!res || res->status != 200) return "";
  Json j = Json::parse(res->body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) return "";
  const Json& m = j["data"][0];
  return m.is_object() && m.contains("id") && m["id"].is_string() ? m["id"].get<std::string>() : "";
}

// Reads one streamed response: SSE events "data: {...}\n\n" up to "data: [DONE]".
class SseReader {
 public:
  explicit SseReader(double t_send_ms) : t_send_ms_(t_send_ms) {}

  bool feed(const char* data, size_t n) {
    buf_.append(data, n);
    for (;;) {
      size_t end = buf_.find("\n\n");
      size_t sep = 2;
      if (const size_t crlf = buf_.find("\r\n\r\n"); crlf != std::string::npos && crlf < end) end = crlf, sep = 4;
      if (end == std::string::npos) return true;
      const std::string event = buf_.substr(0, end);
      buf_.erase(0, end + sep);
      on_event(event);
    }
  }

  void finish(RequestSample* s, double t_end_ms) const {
    s->e2e_ms = t_end_ms - t_send_ms_;
    s->n_output = usage_tokens_ >= 0 ? usage_tokens_ : n_text_chunks_;
    s->n_prompt = usage_prompt_;
    s->n_cached = usage_cached_;
    s->ttft_ms = t_first_ms_ > 0 ? t_first_ms_ - t_send_ms_ : s->e2e_ms;
    s->tpot_ms = s->n_output > 1 ? (s->e2e_ms - s->ttft_ms) / (s->n_output - 1) : 0;
    s->itl_ms = itl_ms_;
    if (!error_.empty()) s->error = error_;
    else if (!done_) s->error = "the stream ended without [DONE]";
    s->ok = s->error.empty();
  }

 private:
  void on_event(const std::string& event) {
    // An event may span several lines; only "data:" lines matter (":" comments are pings).
    size_t pos = 0;
    while (pos < event.size()) {
      size_t eol = event.find('\n', pos);
      if (eol == std::string::npos) eol = event.size();
      std::string line = event.substr(pos, eol - pos);
      pos = eol + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) != 0) continue;
      std::string payload = line.substr(5);
      if (!payload.empty() && payload[0] == ' ') payload.erase(0, 1);
      on_data(payload);
    }
  }

  void on_data(const std::string& payload) {
    if (payload == "[DONE]") {
      done_ = true;
      return;
    }
    const Json j = Json::parse(payload, nullptr, false);
    if (!j.is_object()) return;
    if (j.contains("error")) {
      const Json& e = j["error"];
      error_ = e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>()
                                                                                  : "error event";
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const Json& u = j["usage"];
      if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
        usage_tokens_ = u["completion_tokens"].get<int32_t>();
      if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
        usage_prompt_ = u["prompt_tokens"].get<int32_t>();
      if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object() &&
          u["prompt_tokens_details"].contains("cached_tokens") &&
          u["prompt_tokens_details"]["cached_tokens"].is_number_integer())
        usage_cached_ = u["prompt_tokens_details"]["cached_tokens"].get<int32_t>();
    }
    if (!j.contains("choices") || !j["choices"].is_array()) return;
    for (const Json& ch : j["choices"]) {
      if (!ch.is_object()) continue;
      std::string text;
      if (ch.contains("text") && ch["text"].is_string()) text = ch["text"].get<std::string>();
      else if (ch.contains("delta") && ch["delta"].is_object() && ch["delta"].contains("content") &&
               ch["delta"]["content"].is_string())
        text = ch["delta"]["content"].get<std::string>();
      if (text.empty()) continue;
      const double t = now_ms();
      if (t_first_ms_ == 0) t_first_ms_ = t;
      else itl_ms_.push_back(t - t_last_ms_);
      t_last_ms_ = t;
      n_text_chunks_++;
    }
  }

  double t_send_ms_;
  std::string buf_;
  double t_first_ms_ = 0, t_last_ms_ = 0;
  int32_t n_text_chunks_ = 0;
  int32_t usage_tokens_ = -1;
  int32_t usage_prompt_ = -1;
  int32_t usage_cached_ = -1;
  std::vector<double> itl_ms_;
  std::string error_;
  bool done_ = false;
};

RequestSample run_one_unguarded(httplib::Client& cli, const LoadConfig& c, const std::string& model,
                                const Json& prompt) {
  Json body = {{"prompt", prompt},
               {"max_tokens", c.max_tokens},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (c.ignore_eos) body["ignore_eos"] = true;
  if (c.speculative) body["speculative"] = *c.speculative;
  if (!model.empty()) body["model"] = model;

  RequestSample sample;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = auth_headers(c);
  req.headers.emplace("Accept", "text/event-stream");
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  int status = 0;
  std::string error_body;
  const double t_send = now_ms();
  SseReader reader(t_send);
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      if (error_body.size() < 4096) error_body.append(data, std::min<size_t>(n, 4096));
      return true;
    }
    return reader.feed(data, n);
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  const double t_end = now_ms();
  if (!sent) {
    sample.error = "HTTP: " + httplib::to_string(err);
    return sample;
  }
  if (status != 200) {
    sample.error = "HTTP " + std::to_string(status) + ": " + error_body.substr(0, 300);
    return sample;
  }
  reader.finish(&sample, t_end);
  return sample;
}

// No exception leaves the adapter: a server answering garbage is a failed request.
RequestSample run_one(httplib::Client& cli, const LoadConfig& c, const std::string& model, const Json& prompt) {
  try {
    return run_one_unguarded(cli, c, model, prompt);
  } catch (const std::exception& e) {
    RequestSample s;
    s.error = std::string("client error: ") + e.what();
    return s;
  }
}

bool is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return false;
}

}  // namespace

Status parse_loopback_url(const std::string& url, std::string* host, int* port) {
  constexpr std::string_view kHttp = "http://";
  if (url.rfind(kHttp, 0) != 0) return error("--url: '" + url + "' must start with http:// (a local server)");
  std::string rest = url.substr(kHttp.size());
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    if (rest.find_first_not_of('/', slash) != std::string::npos)
      return error("--url: give the server root (http://HOST:PORT), not a path");
    rest = rest.substr(0, slash);
  }
  std::string h, p = "80";
  if (!rest.empty() && rest[0] == '[') {  // [::1]:8080
    const size_t close = rest.find(']');
    if (close == std::string::npos) return error("--url: bad IPv6 address in '" + url + "'");
    h = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return error("--url: bad port in '" + url + "'");
      p = rest.substr(close + 2);
    }
  } else if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    h = rest.substr(0, colon);
    p = rest.substr(colon + 1);
  } else {
    h = rest;
  }
  char* end = nullptr;
  const long port_value = std::strtol(p.c_str(), &end, 10);
  if (p.empty() || *end != '\0' || port_value <= 0 || port_value > 65535)
    return error("--url: bad port '" + p + "' in '" + url + "'");
  if (!is_loopback(h))
    return error("--url: '" + h + "' is not a loopback address; lumen bench serve only loads servers on this "
                 "machine (localhost, 127.0.0.0/8, ::1)");
  *host = h;
  *port = static_cast<int>(port_value);
  return Status();
}

Result<LoadResult> run_load(const LoadConfig& c) {
  if (c.concurrency < 1 || c.concurrency > 1024) return error("--concurrency: must be in [1, 1024]");
  if (c.n_requests < 1 || c.n_requests > 100000) return error("--requests: must be in [1, 100000]");
  if (!is_loopback(c.host)) return error("load generation only targets loopback addresses");
  auto setup = make_client(c);
  // Reachable, and done loading (a loading server answers 503).
  for (int i = 0;; ++i) {
    auto res = setup->Get("/health", auth_headers(c));
    if (!res)
      return error("cannot reach http://" + c.host + ":" + std::to_string(c.port) + ": " + httplib::to_string(res.error()));
    if (res->status != 503) break;
    if (i >= 1200) return error("the server is still loading after 120 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  LoadResult result;
  Prompts prompts;
  try {
    result.model = c.model.empty() ? discover_model(*setup, c) : c.model;
    LUMEN_ASSIGN_OR_RETURN(prompts, build_prompts(*setup, c));
  } catch (const std::exception& e) {
    return error(std::string("building prompts: ") + e.what());
  }
  result.prompts_as_ids = prompts.as_ids;

  std::mutex mu;  // guards result.samples
  std::atomic<int32_t> next{0};
  const double t0 = now_ms();
  std::atomic<double> t_last_end{t0};
  auto worker = [&] {
    auto cli = make_client(c);
    for (;;) {
      const int32_t i = next.fetch_add(1);
      if (i >= c.n_requests || (now_ms() - t0) / 1e3 > c.time_limit_s) return;
      RequestSample s = run_one(*cli, c, result.model, prompts.prompts[i]);
      const double t_end = now_ms();
      std::lock_guard<std::mutex> lock(mu);
      result.samples.push_back(std::move(s));
      if (t_end > t_last_end.load()) t_last_end.store(t_end);
    }
  };
  std::vector<std::thread> threads;
  const int32_t n_threads = std::min(c.concurrency, c.n_requests);
  threads.reserve(n_threads);
  for (int32_t i = 0; i < n_threads; ++i) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  result.wall_s = (t_last_end.load() - t0) / 1e3;
  return result;
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  p.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return p;
}

LoadSummary summarize(const LoadResult& r, const Sla& sla) {
  LoadSummary s;
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t n_out = 0, n_prompt = 0, n_cached = 0;
  int32_t n_good = 0;
  bool usage_complete = true;  // every ok sample reported prompt and cached tokens
  for (const RequestSample& x : r.samples) {
    if (!x.ok) {
      s.n_failed++;
      continue;
    }
    s.n_ok++;
    n_out += x.n_output;
    if (x.n_prompt >= 0 && x.n_cached >= 0) {
      n_prompt += x.n_prompt;
      n_cached += x.n_cached;
    } else {
      usage_complete = false;
    }
    ttft.push_back(x.ttft_ms);
    e2e.push_back(x.e2e_ms);
    if (x.n_output > 1) tpot.push_back(x.tpot_ms);
    itl.insert(itl.end(), x.itl_ms.begin(), x.itl_ms.end());
    if (x.ttft_ms <= sla.ttft_ms && x.tpot_ms <= sla.tpot_ms) n_good++;
  }
  if (r.wall_s > 0) {
    s.output_tok_s = static_cast<double>(n_out) / r.wall_s;
    s.req_s = s.n_ok / r.wall_s;
    s.goodput_req_s = n_good / r.wall_s;
  }
  if (usage_complete && n_prompt > 0) s.cached_token_ratio = static_cast<double>(n_cached) / static_cast<double>(n_prompt);
  s.ttft_ms = percentiles(std::move(ttft));
  s.tpot_ms = percentiles(std::move(tpot));
  s.itl_ms = percentiles(std::move(itl));
  s.e2e_ms = percentiles(std::move(e2e));
  return s;
}

std::string summary_json(const LoadSummary& s) {
  auto pj = [](const Percentiles& p) { return Json{{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean}}; };
  Json j = {{"output_tok_s", s.output_tok_s}, {"req_s", s.req_s},       {"goodput_req_s", s.goodput_req_s},
            {"n_ok", s.n_ok},                 {"n_failed", s.n_failed}, {"cached_token_ratio", s.cached_token_ratio},
            {"ttft_ms", pj(s.ttft_ms)},
            {"tpot_ms", pj(s.tpot_ms)},       {"itl_ms", pj(s.itl_ms)}, {"e2e_ms", pj(s.e2e_ms)}};
  return j.dump();
}

}  // namespace lumen::server
