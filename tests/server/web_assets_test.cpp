// The chat page embedded in the binary (server/web_assets.h): every file is there with its type,
// `/` is the page, and the page loads only its own script and style (the CSP allows nothing inline).
#include "server/web_assets.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace strata::server {
namespace {

TEST(WebAssets, EmbedsThePage) {
  ASSERT_EQ(web_assets().size(), 3u);
  const WebAsset* index = find_web_asset("/");
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index, find_web_asset("/index.html"));
  EXPECT_STREQ(index->content_type, "text/html; charset=utf-8");
  EXPECT_EQ(index->body.substr(0, 15), "<!doctype html>");
  const WebAsset* js = find_web_asset("/chat.js");
  ASSERT_NE(js, nullptr);
  EXPECT_STREQ(js->content_type, "text/javascript; charset=utf-8");
  const WebAsset* css = find_web_asset("/chat.css");
  ASSERT_NE(css, nullptr);
  EXPECT_STREQ(css->content_type, "text/css; charset=utf-8");
  for (const char* p : {"", "/chat", "/index.htm", "/web/chat.js", "/CHAT.JS", "/chat.js/"})
    EXPECT_EQ(find_web_asset(p), nullptr) << p;
}

// The embedded bytes are the files' bytes (cmake/embed_web.cmake's raw strings change nothing).
TEST(WebAssets, BytesEqualTheSourceFiles) {
  for (const WebAsset& a : web_assets()) {
    std::ifstream f(std::string(STRATA_SOURCE_DIR) + "/server/web" + a.path, std::ios::binary);
    ASSERT_TRUE(f) << a.path;
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_EQ(ss.str(), a.body) << a.path;
  }
}

TEST(WebAssets, NothingInlineOrExternal) {
  const std::string html(find_web_asset("/")->body);
  EXPECT_NE(html.find("<script src=\"/chat.js\""), std::string::npos);
  EXPECT_NE(html.find("<link rel=\"stylesheet\" href=\"/chat.css\">"), std::string::npos);
  EXPECT_EQ(html.find("<script>"), std::string::npos) << "inline script: the CSP would block it";
  EXPECT_EQ(html.find("<style"), std::string::npos) << "inline style: the CSP would block it";
  EXPECT_EQ(html.find(" style=\""), std::string::npos);
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(\son[a-z]+=)"))) << "inline event handler";
  for (const WebAsset& a : web_assets()) EXPECT_EQ(std::string(a.body).find("http"), std::string::npos) << a.path;
  EXPECT_NE(kWebContentSecurityPolicy.find("default-src 'none'"), std::string_view::npos);
  EXPECT_EQ(kWebContentSecurityPolicy.find("unsafe-inline"), std::string_view::npos);
}

}  // namespace
}  // namespace strata::server
