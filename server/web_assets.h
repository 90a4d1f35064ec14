// The chat page (server/web/: one HTML, one JS, one CSS file) compiled into the binary: the build
// turns those files into a generated source (cmake/embed_web.cmake), so `strata serve` answers `/`
// with no files installed beside it. The HTTP side (headers, routes) is in server/http_server.cpp.
// Thread safety: immutable data.
#pragma once

#include <span>
#include <string_view>

namespace strata::server {

// One embedded file.
struct WebAsset {
  const char* path;          // "/index.html", "/chat.js", "/chat.css"
  const char* content_type;  // with charset, from the file's extension
  std::string_view body;
};

// Every embedded file, in server/web/'s build order.
std::span<const WebAsset> web_assets();

// The asset a GET of `path` serves ("/" is "/index.html"), or null.
const WebAsset* find_web_asset(std::string_view path);

// The Content-Security-Policy of the page: its own script, style and fetches only (no inline code,
// no other origin), no framing.
inline constexpr std::string_view kWebContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace strata::server
