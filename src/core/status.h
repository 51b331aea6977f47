// Status / StatusOr: the error channel for bad input (files, requests, flags).
// Out-of-capacity is a plain return value and broken invariants are asserts (DESIGN.md §8.3);
// Status is for failures a user can act on, so messages name the file, tensor or field.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace lancet {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // malformed input: a corrupt file, a bad request field
  kNotFound,         // a file, tensor or key that should exist does not
  kOutOfRange,       // a value past a limit (context length, vocab size)
  kUnimplemented,    // valid input we do not support (an unknown quant type)
  kResourceExhausted,
  kFailedPrecondition,
  kInternal,
  kIoError,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message"
  std::string to_string() const;
  // Returns a copy with "context: " put in front of the message.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
Status InvalidArgument(std::string msg);
Status NotFound(std::string msg);
Status OutOfRange(std::string msg);
Status Unimplemented(std::string msg);
Status ResourceExhausted(std::string msg);
Status FailedPrecondition(std::string msg);
Status Internal(std::string msg);
Status IoError(std::string msg);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& s) : v_(s) { assert(!s.ok() && "StatusOr from an OK status"); }
  StatusOr(Status&& s) : v_(std::move(s)) { assert(!std::get<Status>(v_).ok()); }
  StatusOr(const T& v) : v_(v) {}
  StatusOr(T&& v) : v_(std::move(v)) {}
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status> &&
                                                    !std::is_same_v<std::decay_t<U>, T>>>
  StatusOr(U&& v) : v_(T(std::forward<U>(v))) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace lancet

#define LANCET_CONCAT_INNER(a, b) a##b
#define LANCET_CONCAT(a, b) LANCET_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::lancet::Status _st = (expr);             \
    if (!_st.ok()) return _st;                 \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)  \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

// ASSIGN_OR_RETURN(auto x, f());  declares x or returns f's error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(LANCET_CONCAT(_status_or_, __LINE__), lhs, expr)
