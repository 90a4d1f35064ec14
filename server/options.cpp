#include "server/options.h"

#include <utility>

namespace strata::server {

Status ServerOptions::validate() const {
  if (port < 0 || port > 65535) return InvalidArgument("--port: " + std::to_string(port) + " is outside 0..65535");
  if (parallel < 1 || parallel > 1024) return InvalidArgument("--parallel: " + std::to_string(parallel) + " is outside 1..1024");
  if (ctx < 0) return InvalidArgument("--ctx: must be >= 0 (0 = the model's context)");
  if (max_queue < 0 || max_queue > 100000) return InvalidArgument("--max-queue: must be in 0..100000");
  if (body_limit_bytes < 1024) return InvalidArgument("--body-limit: must be at least 1024 bytes");
  if (default_effort < 0 || default_effort > 100) return InvalidArgument("--default-effort: must be in 1..100 (0 = table default)");
  if (!(keep_alive_s > 0)) return InvalidArgument("--sse-keepalive: must be > 0 seconds");
  if (prefill_chunk < 1) return InvalidArgument("--prefill-chunk: must be >= 1");
  if (batch_tokens < 1) return InvalidArgument("--batch-tokens: must be >= 1");
  if (prefix_cache_mib < 0) return InvalidArgument("--prefix-cache-mib: must be >= 0");
  if (slot_undo < -1) return InvalidArgument("--slot-undo: must be >= 0, or -1 for the model's window_size");
  if (max_connections < 1 || max_connections > 100000) return InvalidArgument("--max-connections: must be in 1..100000");
  if (header_limit_kib < 1 || header_limit_kib > 16384) return InvalidArgument("--header-limit-kib: must be in 1..16384");
  if (max_header_fields < 1 || max_header_fields > 100000) return InvalidArgument("--max-header-fields: must be in 1..100000");
  for (const auto& [flag, v] : {std::pair<const char*, double>{"--header-timeout-s", header_timeout_s},
                                {"--keepalive-timeout-s", keepalive_timeout_s},
                                {"--body-timeout-s", body_timeout_s},
                                {"--write-timeout-s", write_timeout_s}})
    if (!(v >= 0.01 && v <= 86400)) return InvalidArgument(std::string(flag) + ": must be in 0.01..86400 seconds");
  if (body_memory_mib < 1 || body_memory_mib > (int64_t{1} << 20))
    return InvalidArgument("--body-memory-mib: must be in 1..1048576");
  if (http_threads < 0) return InvalidArgument("http threads: must be >= 0");
  if (model_id.empty()) return InvalidArgument("model id: must not be empty");
  return Status();
}

}  // namespace strata::server
