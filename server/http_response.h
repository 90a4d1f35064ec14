// One HTTP/1.1 response as the server writes it: a whole body (JSON, text) written by the
// connection's I/O thread, or a chunked stream (SSE) written by the handler's worker thread while
// the connection has no other operation pending. Plus the byte formats (status line, chunks) and
// a blocking write with a deadline for the worker side.
// Thread safety: values and pure functions; write_all blocks the caller only.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/api_error.h"

namespace strata::server {

// Writes the chunks of a streamed body (one chunk per write; the caller's thread blocks up to the
// write timeout per write). False once the client is gone or stopped reading.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  virtual bool write(std::string_view data) = 0;
  // Writes the last chunk: the body is complete and the connection may carry the next request.
  virtual bool done() = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra fields (Cache-Control, ...)
  bool close = false;  // Connection: close, and the connection ends after this response
  // Set: the body is chunked and written by this function on the worker thread; it returns true
  // when it ended the body with ChunkSink::done() (else the connection is closed after it).
  std::function<bool(ChunkSink&)> stream;
};

// A JSON error envelope response for `e`, in the envelope of `dialect`.
Response error_response(const ApiError& e, ErrorDialect dialect = ErrorDialect::kOpenAI);

// The status line and header block (ends with the blank line). `content_length` < 0 = chunked.
std::string response_head(const Response& r, int64_t content_length, bool close);

// One chunk of a chunked body ("<hex size>\r\n<data>\r\n"); empty data is not a valid chunk.
std::string chunk(std::string_view data);

// Writes all of `data` to non-blocking or blocking socket `fd` (MSG_NOSIGNAL), polling while the
// send buffer is full. False on an error, a closed peer, or when `timeout` passes without progress
// for that long in total.
bool write_all(int fd, std::string_view data, std::chrono::milliseconds timeout);

}  // namespace strata::server
