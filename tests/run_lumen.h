// Running the `lumen` binary from an end-to-end test: its exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace lumen::testing {

struct CmdResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Where the binary keeps interleaved-weight copies: ctest sets LUMEN_CACHE_DIR to the build
// tree; a test binary run by hand gets a directory under the test temp dir, so that the
// copies of its temporary models do not pile up in the user's ~/.cache/lumen.
inline void use_test_cache_dir() {
  const char* env = std::getenv("LUMEN_CACHE_DIR");
  if (env == nullptr) setenv("LUMEN_CACHE_DIR", (::testing::TempDir() + "lumen-test-cache").c_str(), 0);
}

// The binary under test (every test that runs it gets its path here).
inline std::string lumen_bin() {
  use_test_cache_dir();
  const char* env = std::getenv("LUMEN_BIN");
  return env && *env ? env : LUMEN_BIN_PATH;
}

inline std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a shell command line: its exit code (-1 if it did not exit) and stdout.
inline CmdResult run_shell(const std::string& cmd) {
  CmdResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline CmdResult run_lumen(const std::vector<std::string>& args, const std::string& stdin_text = "") {
  static int counter = 0;  // one per test binary (inline)
  const std::string err_path = ::testing::TempDir() + "lumen_stderr_" + std::to_string(getpid()) +
                               "_" + std::to_string(counter++);
  std::string cmd = sh_quote(lumen_bin());
  for (const std::string& a : args) cmd += " " + sh_quote(a);
  cmd += " 2>" + sh_quote(err_path);
  if (stdin_text.empty()) {
    cmd += " </dev/null";
  } else {
    cmd = "printf '%s' " + sh_quote(stdin_text) + " | " + cmd;
  }
  CmdResult r = run_shell(cmd);
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  std::remove(err_path.c_str());
  return r;
}

}  // namespace lumen::testing
