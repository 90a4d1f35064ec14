// structured_output_bench: what constrained decoding (issue 20 item 4) costs per token, printed as
// markdown rows for docs/performance.md#structured-output.
//
// One model, one prompt, the same sampler (temperature 1, seed 1) in every row, run in this order:
// unconstrained, a schema whose answer is one long string (the worst case: inside a string nearly
// every token is allowed, so the mask walk visits most of the vocabulary trie), a mixed object
// schema, response_format json_object. Reports decode tok/s, the ratio to the unconstrained row of
// the same run, the mask's own time per token (TokenConstraint::apply, timed around the call), and
// how many masks walked the vocabulary trie or came from the constraint's cache (in a string).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "model/model.h"
#include "runtime/generator.h"
#include "runtime/token_mask.h"
#include "server/structured_output.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace strata;
using clock_type = std::chrono::steady_clock;

// Times every apply() of the constraint it wraps.
class TimedConstraint : public runtime::TokenConstraint {
 public:
  explicit TimedConstraint(std::shared_ptr<runtime::TokenConstraint> inner) : inner_(std::move(inner)) {}
  size_t apply(std::span<float> logits) override {
    const auto t0 = clock_type::now();
    const size_t n = inner_->apply(logits);
    seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
    ++calls;
    allowed += n;
    return n;
  }
  void accept(int32_t id) override { inner_->accept(id); }
  double seconds = 0;
  int64_t calls = 0;
  uint64_t allowed = 0;

 private:
  std::shared_ptr<runtime::TokenConstraint> inner_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"structured_output_bench: decode tok/s with and without a grammar mask"};
  std::string dir, prompt = "Describe a person as JSON.";
  int threads = 0;
  int n = 64;
  app.add_option("-m,--model", dir, "checkpoint directory")->required();
  app.add_option("-n", n, "tokens to generate per row");
  app.add_option("-p,--prompt", prompt, "prompt text");
  app.add_option("-t,--threads", threads, "threads (0 = physical cores)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::string cmdline = bench::command_line(argc, argv);
  auto loaded = bench::load_model(dir, threads);
  if (!loaded) return 1;
  auto& tok = loaded->tok;
  model::Model& m = *loaded->model;
  const auto t_trie = clock_type::now();
  auto vocab = std::make_shared<const runtime::VocabTrie>(server::grammar_token_bytes(*tok));
  const double trie_s = std::chrono::duration<double>(clock_type::now() - t_trie).count();
  const int32_t eos = tok->token_to_id("<｜end▁of▁sentence｜>").value_or(1);

  using Json = nlohmann::ordered_json;
  struct Mode {
    const char* name;
    std::shared_ptr<const runtime::JsonGrammar> grammar;
  };
  auto schema = [](const char* s) {
    auto g = runtime::JsonGrammar::from_schema(Json::parse(s));
    return std::make_shared<const runtime::JsonGrammar>(std::move(g.value()));
  };
  const std::vector<Mode> modes = {
      {"none", nullptr},
      {"json_schema, one long string", schema(R"({"type":"object","properties":{"answer":{"type":"string"}},
          "required":["answer"],"additionalProperties":false})")},
      {"json_schema, person object", schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
          "age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":3}},
          "required":["name","age","tags"],"additionalProperties":false})")},
      {"json_object", std::make_shared<const runtime::JsonGrammar>(runtime::JsonGrammar::any_object())},
  };
  std::vector<int32_t> ids = {0};
  const std::vector<int32_t> text = tok->encode(prompt, false);
  ids.insert(ids.end(), text.begin(), text.end());
  std::printf(
      "# %s\n# %s: dim %lld, %d layers, %d threads, vocab %d (trie %zu nodes, built in %.3f s), prompt %zu tokens\n",
      cmdline.c_str(), dir.c_str(), static_cast<long long>(m.config().dim), m.config().n_layers, m.pool().n_threads(),
      tok->vocab_size(), vocab->n_nodes(), trie_s, ids.size());
  std::printf(
      "| mode | tokens | decode tok/s | x none | mask ms/token | trie walks / cached masks | allowed ids/token |\n"
      "|---|---|---|---|---|---|---|\n");
  double base = 0;
  for (const Mode& md : modes) {
    runtime::Generator g(m);
    runtime::GenerateOptions o;
    o.max_new_tokens = n;
    o.stop_ids = {eos};
    o.sampler.temperature = 1.0f;
    o.sampler.top_p = 1.0f;
    o.sampler.seed = 1;
    std::shared_ptr<TimedConstraint> timed;
    std::shared_ptr<runtime::GrammarConstraint> gc;
    if (md.grammar) {
      gc = std::make_shared<runtime::GrammarConstraint>(md.grammar, vocab, std::vector<int32_t>{eos});
      timed = std::make_shared<TimedConstraint>(gc);
      o.constraint = timed;
    }
    runtime::GenerateStats st;
    const Status s = g.generate(
        ids, o, [](int32_t) { return true; }, &st);
    if (!s.ok()) return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
    const double tps = st.decode_tok_per_s();
    if (!md.grammar) base = tps;
    const double mask_ms = timed && timed->calls ? 1e3 * timed->seconds / static_cast<double>(timed->calls) : 0;
    const double allowed =
        timed && timed->calls ? static_cast<double>(timed->allowed) / static_cast<double>(timed->calls) : 0;
    std::printf("| %s | %lld | %.2f | %.3f | %.3f | %lld / %lld | %.0f |\n", md.name,
                static_cast<long long>(st.generated_tokens), tps, base > 0 ? tps / base : 0.0, mask_ms,
                static_cast<long long>(gc ? gc->walks() : 0), static_cast<long long>(gc ? gc->reuses() : 0),
                md.grammar ? allowed : static_cast<double>(tok->vocab_size()));
  }
  return 0;
}
