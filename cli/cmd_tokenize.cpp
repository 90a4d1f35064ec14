// strata tokenize -m DIR (--text T | --file F): the token ids of a text as a JSON array on stdout.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "io/file.h"

namespace strata::cli {

namespace {
struct TokenizeOptions {
  std::string model_dir;
  std::string text;
  std::string file;
  bool special = false;
};
}  // namespace

Command register_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  app.add_option("-m,--model", o->model_dir, "checkpoint directory (reads DIR/tokenizer.json)")->required();
  auto* t = app.add_option("--text", o->text, "text to tokenize");
  auto* f = app.add_option("--file", o->file, "file whose bytes to tokenize");
  t->excludes(f);
  app.add_flag("--special", o->special, "turn special-token strings in the text into their ids");
  return [o, t, f]() -> int {
    if (t->count() == 0 && f->count() == 0) return fail_usage(InvalidArgument("tokenize needs --text or --file"));
    std::string text = o->text;
    if (f->count()) {
      auto r = io::read_file_to_string(o->file, 64u << 20, io::ReadFrom::kFileOrStream);  // as `run -f`
      if (!r.ok()) return fail(r.error());
      text = std::move(*r);
    }
    auto tok = load_tokenizer(o->model_dir);
    if (!tok.ok()) return fail(tok.error());
    std::vector<int32_t> ids = (*tok)->encode(text, o->special);
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ", ";
      out += std::to_string(ids[i]);
    }
    out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  };
}

}  // namespace strata::cli
