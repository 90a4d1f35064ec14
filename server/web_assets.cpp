#include "server/web_assets.h"

namespace strata::server {

const WebAsset* find_web_asset(std::string_view path) {
  if (path == "/") path = "/index.html";
  for (const WebAsset& a : web_assets())
    if (path == a.path) return &a;
  return nullptr;
}

}  // namespace strata::server
