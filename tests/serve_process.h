// A `lumen serve` child process for end-to-end tests: spawned with its stderr in a file,
// its port read from the "listening on" line, SIGKILLed if a test leaves it running.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "base/shared_dir.h"
#include "run_lumen.h"  // lumen_bin()

extern char** environ;

namespace lumen::testing {

inline std::string tiny_model() { return shared_dir() + "/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf"; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A child process (`lumen serve` by default) with its stdout and stderr in a file and extra
// environment variables; SIGKILLed if a test leaves it running.
class ServeProcess {
 public:
  explicit ServeProcess(std::vector<std::string> args, std::vector<std::string> env = {}, std::string program = "") {
    static std::atomic<int> n_started{0};
    log_path_ = ::testing::TempDir() + "lumen_serve_" + std::to_string(getpid()) + "_" +
                std::to_string(n_started++) + ".log";
    std::vector<std::string> argv_s;
    if (program.empty()) argv_s = {lumen_bin(), "serve"};
    else argv_s = {program};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
    env_s.insert(env_s.end(), env.begin(), env.end());
    std::vector<char*> envp;
    for (std::string& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 2, 1);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (posix_spawnp(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::remove(log_path_.c_str());
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;
  bool started() const { return pid_ > 0; }
  std::string log() const { return read_file(log_path_); }

  // The port from "listening on http://HOST:PORT", or 0 after the timeout.
  int wait_for_port(double timeout_s = 20) const {
    const std::regex re("listening on http://[^:]+:([0-9]+)");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, re)) return std::stoi(m[1]);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 0;
  }
  pid_t pid() const { return pid_; }
  void signal(int sig) const { kill(pid_, sig); }
  // Waits for the exit; its code (128 + signal if signalled), or -1 if still running after the timeout.
  int wait_exit(double timeout_s = 20) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;
  }
  // Polls /health until 200 (true) or the timeout.
  bool wait_ready(int port, double timeout_s = 30) const {
    httplib::Client cli("127.0.0.1", port);
    cli.set_connection_timeout(2, 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = cli.Get("/health");
      if (r && r->status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Sends SIGTERM and returns the exit code (-1 if it did not exit in time or was signalled).
  int terminate(double timeout_s = 20) {
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

// One streaming completion and how it ended.
struct StreamResult {
  int status = 0;
  bool done = false;         // data: [DONE] arrived
  bool error_event = false;  // an error event came
  bool finished = false;     // a finish_reason "length" came (the tests use ignore_eos)
  bool any_event = false;    // any data event came
  std::string replica;       // X-Replica-Id
};

inline StreamResult stream_completion(int port, int max_tokens, const std::string& prompt,
                                      const std::string& session = "") {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = "{\"prompt\": \"" + prompt + "\", \"max_tokens\": " + std::to_string(max_tokens) +
             ", \"temperature\": 0, \"ignore_eos\": true, \"stream\": true}";
  req.set_header("Content-Type", "application/json");
  if (!session.empty()) req.set_header("X-Session-Id", session);
  StreamResult r;
  std::string raw;
  req.response_handler = [&](const httplib::Response& res) {
    r.status = res.status;
    r.replica = res.get_header_value("X-Replica-Id");
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    raw.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  cli.send(req, res, err);
  if (r.status == 0) r.status = res.status;
  r.done = raw.find("data: [DONE]") != std::string::npos;
  r.error_event = raw.find("data: {\"error\"") != std::string::npos;
  r.finished = raw.find("\"finish_reason\":\"length\"") != std::string::npos;
  r.any_event = raw.find("data: ") != std::string::npos;
  return r;
}

}  // namespace lumen::testing
