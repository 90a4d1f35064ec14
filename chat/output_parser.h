// The V4.1 output parser (chat-and-api.md §5): generated token ids -> reasoning_content, content and
// tool calls, incrementally, for streaming and non-streaming responses alike.
//
// A state machine over detokenized text: REASONING (until </think>), CONTENT, TOOLS (inside a
// <｜DSML｜ calls> block). It never lets markup out: a suffix that could still become a marker
// (</think>, the tool-block start, a stop string) is held back until it is decided, and incomplete
// UTF-8 is held by the StreamDecoder. Tool calls are streamed as a start delta once the name is
// complete, then one arguments fragment per completed parameter and a closing "}", so the
// concatenated fragments of a call are exactly its final `arguments` string.
// Ownership: borrows the Tokenizer. Thread safety: one parser per generation.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/render.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace strata::chat {

struct ParserOptions {
  ParseStart start = ParseStart::kContent;  // from RenderedPrompt::start
  bool tools = false;                       // tools were rendered: parse DSML blocks (else DSML is content)
  std::string forced_tool;                  // start inside this tool's invoke (named tool_choice)
  std::vector<std::string> stop;            // stop strings, matched in content only (non-empty strings)
  bool parallel_tool_calls = true;          // false: generation ends after the first complete call
  bool raw = false;                         // raw completion text (/v1/completions): no <think> handling
  // Makes a tool-call id; default "call_" + 24 random hex digits.
  std::function<std::string()> make_call_id;
};

// A piece of output to stream.
struct Delta {
  enum class Kind { kReasoning, kContent, kToolCallStart, kToolCallArguments };
  Kind kind = Kind::kContent;
  std::string text;  // reasoning / content text, or an arguments fragment
  int index = 0;     // tool-call index (kToolCallStart, kToolCallArguments)
  std::string id;    // kToolCallStart: the call id
  std::string name;  // kToolCallStart: the function name
};

struct ParsedToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text, json.dumps style (chat/json_dumps.h)
};

enum class FinishReason { kStop, kLength, kToolCalls };
std::string_view finish_reason_name(FinishReason r);

class OutputParser {
 public:
  OutputParser(const tokenizer::Tokenizer& tokenizer, ParserOptions options);

  // Feeds one generated id. Appends newly visible deltas to `out`. Returns true when generation must
  // end now: EOS or a defensive end id (BOS, <｜System｜>, <｜User｜>, <｜Assistant｜>: never shown),
  // the tool block closed, a stop string matched, or the first call completed with
  // parallel_tool_calls false. Later calls do nothing and return true.
  // When the vocabulary has `</think>` as one token, only that id ends reasoning (a stray one in
  // content is dropped); `</think>` spelled in ordinary text tokens is reasoning or content text.
  bool push_token(int32_t id, std::vector<Delta>* out);

  // Feeds decoded text directly (tests; the same state machine, except that here the text
  // `</think>` is the marker, since a text chunk has no token boundaries). Returns true as push_token.
  bool push_text(std::string_view text, std::vector<Delta>* out);

  // Generation stopped from outside: `length` true for max_tokens / context exhausted (finish
  // reason length), false for an end the caller treats as a normal stop. Flushes held-back text
  // (none of it can become markup any more) and drops an incomplete tool call. Idempotent.
  void finish(bool length, std::vector<Delta>* out);

  bool done() const { return mode_ == Mode::kDone; }
  // True while generated tokens count as reasoning tokens (before and including </think>).
  bool in_reasoning() const { return mode_ == Mode::kReasoning; }
  // True while generated text goes to content (not reasoning, not a tool-call block, not done).
  bool in_content() const { return mode_ == Mode::kContent; }
  FinishReason finish_reason() const { return finish_; }
  // The stop string whose match ended generation ("" when none did): Anthropic's stop_sequence.
  const std::string& stop_sequence() const { return stop_sequence_; }

  // What the whole generation produced so far (the non-streaming message).
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ParsedToolCall>& tool_calls() const { return calls_; }
  // True when reasoning was produced or the generation started in reasoning.
  bool saw_reasoning() const { return saw_reasoning_; }

 private:
  enum class Mode { kReasoning, kContent, kTools, kDone };
  enum class ToolState { kBetweenInvokes, kInvokeName, kBetweenParams, kParamHeader, kParamValue };

  bool push_some(std::string_view text, std::vector<Delta>* out);
  void process(std::vector<Delta>* out);
  void process_reasoning(std::vector<Delta>* out);
  void process_content(std::vector<Delta>* out);
  void process_tools(std::vector<Delta>* out);
  void emit(Delta::Kind kind, std::string_view text, std::vector<Delta>* out);
  void enter_tools(std::string_view raw_marker);
  void start_call(std::string name, std::vector<Delta>* out);
  void close_call(std::vector<Delta>* out);
  void tools_failed(std::vector<Delta>* out);
  void end(FinishReason r);
  std::string new_call_id();

  const tokenizer::Tokenizer* tok_;
  ParserOptions opt_;
  tokenizer::StreamDecoder decoder_;
  std::vector<int32_t> end_ids_;  // EOS first
  int32_t think_close_id_ = -1;   // the `</think>` token (-1: none, or raw mode)
  bool think_text_ = true;        // the text `</think>` is the marker (push_text, or no such token)

  Mode mode_;
  FinishReason finish_ = FinishReason::kStop;
  std::string stop_sequence_;     // the stop string that matched, if any
  std::string pending_;           // undecided text (reasoning / content modes)
  bool content_started_ = false;  // any content emitted (a leading <think> switches to reasoning)
  bool saw_reasoning_ = false;
  bool tools_enabled_;            // false after an unparseable block: DSML is content from then on

  // TOOLS mode.
  ToolState ts_ = ToolState::kBetweenInvokes;
  std::string block_;      // unconsumed block text
  std::string block_raw_;  // every byte since the block start (the fallback content)
  std::string param_key_, param_string_;
  size_t value_scanned_ = 0;  // bytes of a parameter value already searched for its closing tag
  struct OpenCall {
    bool open = false;
    int n_params = 0;
    std::string arguments;
  } call_;
  int n_started_ = 0;  // calls started (streamed indices)

  std::string reasoning_, content_;
  std::vector<ParsedToolCall> calls_;
  std::vector<ParsedToolCall> started_;  // started calls (index = stream index), complete or not
  uint64_t rng_state_;
};

}  // namespace strata::chat
