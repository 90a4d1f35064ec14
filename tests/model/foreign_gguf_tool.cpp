// Test-only CLI over tests/model/foreign_gguf_writer.h, for shell checks of `strata -m X.gguf` on a
// GGUF in ik_llama.cpp / ds4's layout:
//   foreign_gguf_tool IN.gguf OUT.gguf [--exact]
// IN is a `strata quantize` GGUF of an official checkpoint (Engram kept); --exact keeps BF16/F32 and
// the official bits, the default applies ds4's recipe (F16 projections, Q8_0 linears and head).
#include <cstdio>
#include <string>

#include "tests/model/foreign_gguf_writer.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4 || (argc == 4 && std::string(argv[3]) != "--exact")) {
    std::fprintf(stderr, "usage: foreign_gguf_tool IN.gguf OUT.gguf [--exact]\n");
    return 2;
  }
  strata::test::ForeignGgufOptions o;
  o.lossy = argc != 4;
  const strata::Status s = strata::test::write_foreign_gguf(argv[1], argv[2], o);
  if (!s.ok()) {
    std::fprintf(stderr, "foreign_gguf_tool: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
