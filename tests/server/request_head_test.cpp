// check_request_head (server/request_head.h): the early answers from a request head alone, on
// heads parsed by Beast and on heads Beast refuses (parse_head_leniently).
#include "server/request_head.h"

#include <gtest/gtest.h>

#include <string>

namespace strata::server {
namespace {

RequestHead head_of(const std::string& raw) {
  auto h = parse_head_leniently(raw);
  EXPECT_TRUE(h.has_value()) << raw;
  return h ? *h : RequestHead{};
}

TEST(RequestHead, Answers) {
  HeadPolicy p;
  p.body_limit_bytes = 4096;
  p.api_key = "k";
  p.max_header_fields = 5;
  const std::string auth = "Authorization: Bearer k\r\n";
  struct Case {
    std::string raw;
    int status;  // 0 = goes on
    const char* says;
  };
  const Case cases[] = {
      {"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 0, ""},
      {"POST /v1/chat/completions HTTP/1.1\r\n" + auth + "Content-Length: 10\r\n\r\n", 0, ""},
      {"POST /v1/chat/completions HTTP/1.1\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n", 0, ""},
      {"GET /health HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\n\r\n", 431, "6 header fields"},
      {"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, "gzip"},
      {"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400, "both"},
      {"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n", 400, "more than one"},
      {"GET /health HTTP/1.1\r\nContent-Length: 3\r\n\r\n", 400, "GET requests take no body"},
      {"POST /v1/completions HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "'-1'"},
      {"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413, "4096"},
      {"POST /v1/completions HTTP/1.1\r\nContent-Length: 4097\r\n\r\n", 413, "4096"},
      {"POST /nope HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "takes no chunked"},
      {"GET /v1/models HTTP/1.1\r\n\r\n", 401, "Missing API key"},
      {"GET /v1/models HTTP/1.1\r\nAuthorization: Bearer x\r\n\r\n", 401, "Incorrect"},
      {"GET /v1/models HTTP/1.1\r\nx-api-key: k\r\n\r\n", 0, ""},  // Anthropic clients' header
      {"GET /v1/models HTTP/1.1\r\nX-Api-Key: x\r\n\r\n", 401, "Incorrect"},
      {"POST /v1/messages HTTP/1.1\r\nx-api-key: k\r\nTransfer-Encoding: chunked\r\n\r\n", 0, ""},
      {"GET /metrics HTTP/1.1\r\n\r\n", 0, ""},  // no key needed outside /v1/
      {"POST /v1/chat/completions HTTP/1.1\r\n" + auth + "Content-Type: Multipart/form-data\r\nContent-Length: 3\r\n\r\n",
       415, "JSON"},
  };
  for (const Case& k : cases) {
    const ApiError e = check_request_head(head_of(k.raw), p);
    EXPECT_EQ(e.status, k.status) << k.raw << e.message;
    EXPECT_NE(e.message.find(k.says), std::string::npos) << k.raw << e.message;
  }
}

TEST(RequestHead, DeclaresBodyAndPath) {
  EXPECT_FALSE(declares_body(head_of("POST /x HTTP/1.1\r\n\r\n")));
  EXPECT_FALSE(declares_body(head_of("POST /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n")));
  EXPECT_TRUE(declares_body(head_of("POST /x HTTP/1.1\r\nContent-Length: 1\r\n\r\n")));
  EXPECT_TRUE(declares_body(head_of("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")));
  EXPECT_EQ(target_path("/v1/models?x=1"), "/v1/models");
  EXPECT_TRUE(takes_body(head_of("POST /v1/completions?a HTTP/1.1\r\n\r\n")));
  EXPECT_FALSE(takes_body(head_of("PUT /v1/completions HTTP/1.1\r\n\r\n")));
  EXPECT_TRUE(takes_body(head_of("POST /v1/messages HTTP/1.1\r\n\r\n")));
  EXPECT_TRUE(takes_body(head_of("POST /v1/responses HTTP/1.1\r\n\r\n")));
  EXPECT_TRUE(takes_body(head_of("POST /v1/messages/count_tokens HTTP/1.1\r\n\r\n")));
}

TEST(RequestHead, LenientParseRefusesWhatCannotBeSplit) {
  EXPECT_FALSE(parse_head_leniently("").has_value());
  EXPECT_FALSE(parse_head_leniently("GARBAGE\r\n\r\n").has_value());
  EXPECT_FALSE(parse_head_leniently("GET / HTTP/1.1\r\nno colon\r\n\r\n").has_value());
  const auto h = parse_head_leniently("\r\nGET /a HTTP/1.0\r\nX:  y \r\n\r\n");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->method_string(), "GET");
  EXPECT_EQ(h->target(), "/a");
  EXPECT_EQ(h->version(), 10);
  EXPECT_EQ((*h)["X"], "y");
}

}  // namespace
}  // namespace strata::server
