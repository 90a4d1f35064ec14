// Status and Result<T>: how every fallible strata call reports failure (STYLE.md §3.1).
//
// An OK Status is one null pointer; an error carries a code and a message that says where, what,
// what was found and what was expected. Result<T> holds a value or an error Status and has the shape
// of C++23 std::expected (has_value, value, error) so the later move is mechanical.
// Thread safety: values are immutable after construction; copy freely across threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace strata {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad flag, request, config or input
  kNotFound,           // missing file, tensor or field
  kCorruption,         // bytes that do not parse; size or checksum mismatch
  kIOError,            // the OS said no (message carries errno text)
  kNotSupported,       // valid but not implemented here
  kResourceExhausted,  // memory, disk, context or queue limits
  kCancelled,          // the client went away
  kInternal,           // a bug surfaced as an error
};

// Name of a code, e.g. "InvalidArgument".
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status ok_status() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // The message without the code prefix ("" when OK).
  const std::string& message() const;
  // "InvalidArgument: <message>" or "OK".
  std::string to_string() const;

  // Returns a copy whose message is "<prefix>: <message>" (no-op when OK).
  Status with_context(std::string_view prefix) const;

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;
};

[[nodiscard]] inline Status InvalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
[[nodiscard]] inline Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
[[nodiscard]] inline Status Corruption(std::string m) { return Status(StatusCode::kCorruption, std::move(m)); }
[[nodiscard]] inline Status NotSupported(std::string m) { return Status(StatusCode::kNotSupported, std::move(m)); }
[[nodiscard]] inline Status ResourceExhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
[[nodiscard]] inline Status Cancelled(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }
[[nodiscard]] inline Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
// An I/O error; `err` is an errno value whose text is appended.
[[nodiscard]] Status IOError(std::string m, int err = 0);

// A value of type T or an error Status. Accessing value() on an error aborts (a bug, not an error).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result constructed from OK status");
  }

  bool has_value() const { return v_.index() == 0; }
  bool ok() const { return has_value(); }
  explicit operator bool() const { return has_value(); }

  T& value() & { check(); return std::get<0>(v_); }
  const T& value() const& { check(); return std::get<0>(v_); }
  T&& value() && { check(); return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // The error; OK status when a value is held.
  Status error() const { return has_value() ? Status() : std::get<Status>(v_); }
  Status status() const { return error(); }

 private:
  void check() const;
  std::variant<T, Status> v_;
};

[[noreturn]] void check_failed(const char* file, int line, const char* cond, std::string_view msg);

template <typename T>
void Result<T>::check() const {
  if (!has_value()) check_failed(__FILE__, __LINE__, "Result::value()", std::get<Status>(v_).to_string());
}

}  // namespace strata

#define STRATA_CONCAT_INNER_(a, b) a##b
#define STRATA_CONCAT_(a, b) STRATA_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not OK.
#define STRATA_RETURN_IF_ERROR(expr)               \
  do {                                             \
    ::strata::Status strata_status_ = (expr);      \
    if (!strata_status_.ok()) return strata_status_; \
  } while (0)

// `STRATA_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its error.
#define STRATA_ASSIGN_OR_RETURN(lhs, expr) STRATA_ASSIGN_OR_RETURN_IMPL_(STRATA_CONCAT_(strata_result_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.has_value()) return tmp.error();           \
  lhs = std::move(tmp).value()

// Aborts with file:line when `cond` is false: for bugs, never for bad input.
#define STRATA_CHECK(cond, msg)                                              \
  do {                                                                       \
    if (!(cond)) ::strata::check_failed(__FILE__, __LINE__, #cond, (msg));   \
  } while (0)

#ifdef NDEBUG
#define STRATA_DCHECK(cond, msg) \
  do {                           \
  } while (0)
#else
#define STRATA_DCHECK(cond, msg) STRATA_CHECK(cond, msg)
#endif
