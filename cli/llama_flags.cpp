#include "cli/llama_flags.h"

#include <cctype>
#include <string_view>
#include <vector>

namespace strata::cli {

namespace {

struct LlamaFlag {
  std::vector<std::string_view> spellings;
  std::string_view what;    // what it does in llama.cpp
  std::string_view advice;  // what strata does instead
};

constexpr std::string_view kPlacement =
    "strata places the weights itself (no GPU backend yet): see --load-mode, --ram-budget, --pin-layers and --hot, "
    "and `strata plan -m DIR` for the placement";

const LlamaFlag kFlags[] = {
    {{"-ngl", "--n-gpu-layers", "--gpu-layers", "-ngld", "--n-gpu-layers-draft"}, "GPU layer offload", kPlacement},
    {{"-ts", "--tensor-split", "-sm", "--split-mode", "-mg", "--main-gpu", "-nkvo", "--no-kv-offload"},
     "multi-GPU / KV offload",
     kPlacement},
    {{"--mlock", "--no-mmap"}, "memory mapping", kPlacement},
    {{"-fa", "--flash-attn"},
     "flash attention",
     "strata's attention is the model's CSA2 sparse attention, always on; there is nothing to switch"},
    {{"-ctk", "--cache-type-k", "-ctv", "--cache-type-v"},
     "KV cache types",
     "the KV cache format is the model's (FP8 window, FP4 compressed KV and index keys{kv}); there is nothing to "
     "choose"},
    {{"-np"}, "parallel sequences", "strata serve takes --parallel N"},
    {{"-cnv", "--conversation", "-i", "--interactive"},
     "interactive chat",
     "strata run answers one turn; continue with --save-session F / --load-session F, or use strata serve"},
};

bool matches(std::string_view arg, std::string_view flag) {
  if (arg == flag) return true;
  if (arg.size() <= flag.size() || arg.substr(0, flag.size()) != flag) return false;
  const char next = arg[flag.size()];
  const bool short_flag = flag.size() > 1 && flag[0] == '-' && flag[1] != '-';
  return next == '=' || (short_flag && std::isdigit(static_cast<unsigned char>(next)));
}

// True when CLI11's error text is about `arg`.
bool named_by(std::string_view parse_error, std::string_view arg) {
  if (parse_error.find(arg) != std::string_view::npos) return true;
  if (arg.size() > 2 && arg[0] == '-' && arg[1] != '-')
    return parse_error.find("'" + std::string(arg.substr(2)) + "'") != std::string_view::npos;
  return false;
}

}  // namespace

std::string llama_cpp_flag_hint(int argc, char** argv, std::string_view parse_error, std::string_view kv_note) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    if (!named_by(parse_error, a)) continue;
    for (const LlamaFlag& f : kFlags)
      for (std::string_view s : f.spellings)
        if (matches(a, s)) {
          std::string advice(f.advice);
          if (const size_t at = advice.find("{kv}"); at != std::string::npos)
            advice.replace(at, 4, kv_note.empty() ? "" : ": " + std::string(kv_note));
          return std::string(s) + " (llama.cpp's " + std::string(f.what) + ") is not a strata flag: " + advice;
        }
  }
  return "";
}

}  // namespace strata::cli
