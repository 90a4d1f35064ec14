#include "core/status.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace strata {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kIOError: return "IOError";
    case StatusCode::kNotSupported: return "NotSupported";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kCancelled: return "Cancelled";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) rep_ = std::make_shared<const Rep>(Rep{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string s(status_code_name(code()));
  s += ": ";
  s += rep_->message;
  return s;
}

Status Status::with_context(std::string_view prefix) const {
  if (ok()) return *this;
  std::string m(prefix);
  m += ": ";
  m += rep_->message;
  return Status(rep_->code, std::move(m));
}

Status IOError(std::string m, int err) {
  if (err != 0) {
    m += ": ";
    m += std::strerror(err);
  }
  return Status(StatusCode::kIOError, std::move(m));
}

void check_failed(const char* file, int line, const char* cond, std::string_view msg) {
  std::fprintf(stderr, "strata: CHECK failed at %s:%d: %s: %.*s\n", file, line, cond, static_cast<int>(msg.size()),
               msg.data());
  std::abort();
}

}  // namespace strata
