// Status / Result: the error grade for bad external input (files, flags, HTTP bodies).
// The message names the field and the value at fault. Internal invariants use LUMEN_CHECK.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace lumen {

// Who is at fault / what the caller can do, for the few places that must tell apart
// (the server maps these to HTTP 400 / 503 / 404 / 500).
enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,  // bad input: a file, a flag, a request field
  kUnavailable,      // try again later: a queue is full, the engine is loading
  kNotFound,
  kInternal,
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status ok_status() { return Status(); }
  static Status error(std::string message, StatusCode code = StatusCode::kInvalidArgument) {
    Status s;
    s.message_ = std::move(message);
    s.code_ = code == StatusCode::kOk ? StatusCode::kInternal : code;
    return s;
  }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status error(std::string message, StatusCode code = StatusCode::kInvalidArgument) {
  return Status::error(std::move(message), code);
}

// Result<T>: a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}             // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {}      // NOLINT(implicit); must be non-ok
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  const std::string& message() const { return status().message(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace lumen

#define LUMEN_CONCAT_INNER_(a, b) a##b
#define LUMEN_CONCAT_(a, b) LUMEN_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not ok.
#define LUMEN_TRY(expr)                          \
  do {                                           \
    ::lumen::Status lumen_try_status_ = (expr);  \
    if (!lumen_try_status_.ok()) return lumen_try_status_; \
  } while (0)

// `LUMEN_ASSIGN_OR_RETURN(auto x, f());` declares/assigns x from a Result or returns its Status.
#define LUMEN_ASSIGN_OR_RETURN(lhs, expr) \
  LUMEN_ASSIGN_OR_RETURN_IMPL_(LUMEN_CONCAT_(lumen_result_, __LINE__), lhs, expr)
#define LUMEN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
