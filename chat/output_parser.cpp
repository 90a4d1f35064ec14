#include "chat/output_parser.h"

#include <algorithm>
#include <random>

#include "chat/dsml.h"
#include "chat/json_dumps.h"

namespace strata::chat {

namespace {

// The tool-block starts (§5): optionally preceded by "\n\n", which belongs to the block.
constexpr std::string_view kToolStarts[] = {
    "\n\n<｜DSML｜ calls>", dsml::kCallsOpen, "\n\n<｜DSML｜tool_calls>", dsml::kCallsOpenV4};

struct Match {
  size_t pos = std::string::npos;
  size_t len = 0;
  size_t which = 0;
};

// The earliest occurrence of any marker (the longer one on a tie). Empty markers never match.
Match earliest(std::string_view s, const std::vector<std::string_view>& markers) {
  Match best;
  for (size_t k = 0; k < markers.size(); ++k) {
    if (markers[k].empty()) continue;
    const size_t p = s.find(markers[k]);
    if (p == std::string::npos) continue;
    if (p < best.pos || (p == best.pos && markers[k].size() > best.len)) best = Match{p, markers[k].size(), k};
  }
  return best;
}

// Length of the longest suffix of `s` that is a proper prefix of some marker: text to hold back.
size_t hold_length(std::string_view s, const std::vector<std::string_view>& markers) {
  size_t best = 0;
  for (const std::string_view m : markers) {
    if (m.empty()) continue;
    for (size_t k = std::min(s.size(), m.size() - 1); k > best; --k)
      if (s.substr(s.size() - k) == m.substr(0, k)) {
        best = k;
        break;
      }
  }
  return best;
}

bool starts_with_any(std::string_view s, std::initializer_list<std::string_view> tags, std::string_view* which) {
  for (const std::string_view t : tags)
    if (s.substr(0, t.size()) == t) {
      *which = t;
      return true;
    }
  return false;
}

bool is_prefix_of_any(std::string_view s, std::initializer_list<std::string_view> tags) {
  for (const std::string_view t : tags)
    if (s.size() < t.size() && t.substr(0, s.size()) == s) return true;
  return false;
}

void skip_ws(std::string* s) {
  size_t i = 0;
  while (i < s->size() && ((*s)[i] == ' ' || (*s)[i] == '\n' || (*s)[i] == '\t' || (*s)[i] == '\r')) ++i;
  s->erase(0, i);
}

}  // namespace

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kToolCalls: return "tool_calls";
  }
  return "stop";
}

OutputParser::OutputParser(const tokenizer::Tokenizer& tokenizer, ParserOptions options)
    : tok_(&tokenizer),
      opt_(std::move(options)),
      decoder_(tokenizer, /*skip_special=*/true),
      tools_enabled_(opt_.tools) {
  if (!opt_.raw) think_close_id_ = tokenizer.token_to_id(dsml::kThinkClose).value_or(-1);
  for (const std::string_view t : {dsml::kEos, dsml::kBos, dsml::kSystem, dsml::kUser, dsml::kAssistant})
    if (auto id = tokenizer.token_to_id(t)) end_ids_.push_back(*id);
  std::erase_if(opt_.stop, [](const std::string& s) { return s.empty(); });
  rng_state_ = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  switch (opt_.start) {
    case ParseStart::kReasoning:
      mode_ = Mode::kReasoning;
      saw_reasoning_ = true;
      break;
    case ParseStart::kContent:
      mode_ = Mode::kContent;
      break;
    case ParseStart::kTools:
      mode_ = Mode::kTools;
      tools_enabled_ = true;
      if (!opt_.forced_tool.empty()) {
        // The prompt ended inside `<｜DSML｜ invoke name="NAME">`: parse the name as if generated, so
        // the start delta comes out with the first push; it is not part of the fallback text.
        block_ = opt_.forced_tool + "\">";
        ts_ = ToolState::kInvokeName;
      }
      break;
  }
}

std::string OutputParser::new_call_id() {
  if (opt_.make_call_id) return opt_.make_call_id();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "call_";
  for (int half = 0; half < 2; ++half) {
    // splitmix64: 12 hex digits from each of two draws.
    uint64_t z = (rng_state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    for (int i = 0; i < 12; ++i) id += kHex[(z >> (4 * i)) & 15];
  }
  return id;
}

void OutputParser::emit(Delta::Kind kind, std::string_view text, std::vector<Delta>* out) {
  if (text.empty()) return;
  if (kind == Delta::Kind::kReasoning) {
    reasoning_ += text;
  } else if (kind == Delta::Kind::kContent) {
    content_ += text;
    content_started_ = true;
  }
  if (!out->empty() && out->back().kind == kind && kind != Delta::Kind::kToolCallStart &&
      kind != Delta::Kind::kToolCallArguments) {
    out->back().text += text;
    return;
  }
  Delta d;
  d.kind = kind;
  d.text = std::string(text);
  out->push_back(std::move(d));
}

bool OutputParser::push_token(int32_t id, std::vector<Delta>* out) {
  if (done()) return true;
  for (const int32_t e : end_ids_)
    if (id == e) {
      finish(/*length=*/false, out);
      return true;
    }
  // DECISION: with `</think>` one token of the vocabulary (id 128822, chat-and-api.md §1), only that
  // token ends reasoning; the same characters written as ordinary text tokens are text (reasoning
  // or content). The grammar of a constrained answer starts after that token too
  // (runtime/token_mask.h), so parser and grammar agree on where the answer begins, and an answer
  // the schema lets hold the text "</think>" keeps it (break-in issue 20 item 4, findings 1 and 3).
  think_text_ = think_close_id_ < 0;
  if (id == think_close_id_) {
    if (const std::string head = decoder_.flush(); !head.empty()) push_some(head, out);
    if (done()) return true;
    if (mode_ == Mode::kReasoning) {
      // Nothing held back can become a marker inside this reasoning any more.
      emit(Delta::Kind::kReasoning, pending_, out);
      pending_.clear();
      mode_ = Mode::kContent;
      process(out);
    } else if (mode_ == Mode::kContent) {
      content_started_ = true;  // a stray </think> token is dropped
    } else {
      push_some(std::string(dsml::kThinkClose), out);  // inside a tool block: raw text, as before
    }
    return done();
  }
  return push_some(decoder_.push(id), out);
}

bool OutputParser::push_text(std::string_view text, std::vector<Delta>* out) {
  think_text_ = true;
  return push_some(text, out);
}

bool OutputParser::push_some(std::string_view text, std::vector<Delta>* out) {
  if (done()) return true;
  if (mode_ == Mode::kTools) {
    block_ += text;
    block_raw_ += text;
  } else {
    pending_ += text;
  }
  process(out);
  return done();
}

void OutputParser::process(std::vector<Delta>* out) {
  for (;;) {
    const Mode before = mode_;
    switch (mode_) {
      case Mode::kReasoning: process_reasoning(out); break;
      case Mode::kContent: process_content(out); break;
      case Mode::kTools: process_tools(out); break;
      case Mode::kDone: return;
    }
    if (mode_ == before) return;
  }
}

void OutputParser::enter_tools(std::string_view raw_marker) {
  mode_ = Mode::kTools;
  block_raw_ = std::string(raw_marker);
  block_.clear();
  ts_ = ToolState::kBetweenInvokes;
  call_ = OpenCall{};
}

void OutputParser::process_reasoning(std::vector<Delta>* out) {
  // Index 0 is the `</think>` text (push_text) or a marker that never occurs (push_token: the token).
  std::vector<std::string_view> markers = {think_text_ ? dsml::kThinkClose : std::string_view()};
  // DECISION: chat-and-api.md §5 — a tool block inside unclosed reasoning ends the reasoning and is
  // parsed (vLLM, llama.cpp); ds4 keeps it as reasoning.
  if (tools_enabled_) markers.insert(markers.end(), std::begin(kToolStarts), std::end(kToolStarts));
  const Match m = earliest(pending_, markers);
  if (m.pos == std::string::npos) {
    const size_t hold = hold_length(pending_, markers);
    emit(Delta::Kind::kReasoning, std::string_view(pending_).substr(0, pending_.size() - hold), out);
    pending_.erase(0, pending_.size() - hold);
    return;
  }
  emit(Delta::Kind::kReasoning, std::string_view(pending_).substr(0, m.pos), out);
  std::string rest = pending_.substr(m.pos + m.len);
  const std::string marker = pending_.substr(m.pos, m.len);
  pending_.clear();
  if (m.which == 0) {
    mode_ = Mode::kContent;
    pending_ = std::move(rest);
  } else {
    enter_tools(marker);
    block_ = rest;
    block_raw_ += rest;
  }
}

void OutputParser::process_content(std::vector<Delta>* out) {
  for (;;) {
    if (!content_started_ && !opt_.raw) {
      // A <think> at the very start of the content opens reasoning.
      if (pending_.compare(0, dsml::kThinkOpen.size(), dsml::kThinkOpen) == 0) {
        pending_.erase(0, dsml::kThinkOpen.size());
        mode_ = Mode::kReasoning;
        saw_reasoning_ = true;
        return;
      }
      if (!pending_.empty() && dsml::kThinkOpen.substr(0, pending_.size()) == pending_) return;
    }
    std::vector<std::string_view> markers;
    if (!opt_.raw && think_text_) markers.push_back(dsml::kThinkClose);
    const size_t first_tool = markers.size();
    if (tools_enabled_) markers.insert(markers.end(), std::begin(kToolStarts), std::end(kToolStarts));
    const size_t first_stop = markers.size();
    for (const std::string& s : opt_.stop) markers.push_back(s);
    const Match m = earliest(pending_, markers);
    if (m.pos == std::string::npos) {
      const size_t hold = hold_length(pending_, markers);
      emit(Delta::Kind::kContent, std::string_view(pending_).substr(0, pending_.size() - hold), out);
      pending_.erase(0, pending_.size() - hold);
      return;
    }
    emit(Delta::Kind::kContent, std::string_view(pending_).substr(0, m.pos), out);
    std::string rest = pending_.substr(m.pos + m.len);
    const std::string marker = pending_.substr(m.pos, m.len);
    pending_.clear();
    if (m.which >= first_stop) {  // a stop string: it and everything after are dropped
      stop_sequence_ = opt_.stop[m.which - first_stop];
      end(FinishReason::kStop);
      return;
    }
    if (m.which >= first_tool) {
      enter_tools(marker);
      block_ = rest;
      block_raw_ += rest;
      return;
    }
    pending_ = std::move(rest);  // a stray </think> is dropped
    content_started_ = true;
  }
}

void OutputParser::start_call(std::string name, std::vector<Delta>* out) {
  ParsedToolCall c;
  c.id = new_call_id();
  c.name = std::move(name);
  started_.push_back(c);
  call_ = OpenCall{true, 0, ""};
  Delta d;
  d.kind = Delta::Kind::kToolCallStart;
  d.index = static_cast<int>(started_.size()) - 1;
  d.id = c.id;
  d.name = c.name;
  out->push_back(std::move(d));
}

void OutputParser::close_call(std::vector<Delta>* out) {
  const std::string frag = call_.n_params == 0 ? "{}" : "}";
  call_.arguments += frag;
  Delta d;
  d.kind = Delta::Kind::kToolCallArguments;
  d.index = static_cast<int>(started_.size()) - 1;
  d.text = frag;
  out->push_back(std::move(d));
  ParsedToolCall c = started_.back();
  c.arguments = call_.arguments;
  started_.back().arguments = call_.arguments;
  calls_.push_back(std::move(c));
  call_ = OpenCall{};
  if (!opt_.parallel_tool_calls) end(FinishReason::kToolCalls);
}

void OutputParser::tools_failed(std::vector<Delta>* out) {
  // §5: an unparseable block becomes content, raw, from its start; no tool calls.
  calls_.clear();
  call_ = OpenCall{};
  tools_enabled_ = false;
  mode_ = Mode::kContent;
  content_started_ = true;
  pending_ = std::move(block_raw_);
  block_raw_.clear();
  block_.clear();
  (void)out;
}

void OutputParser::process_tools(std::vector<Delta>* out) {
  for (;;) {
    std::string_view tag;
    switch (ts_) {
      case ToolState::kBetweenInvokes:
        skip_ws(&block_);
        if (block_.empty()) return;
        if (starts_with_any(block_, {dsml::kInvokeOpen, dsml::kInvokeOpenV4}, &tag)) {
          block_.erase(0, tag.size());
          ts_ = ToolState::kInvokeName;
        } else if (starts_with_any(block_, {dsml::kCallsClose, dsml::kCallsCloseV4}, &tag)) {
          end(calls_.empty() ? FinishReason::kStop : FinishReason::kToolCalls);
          return;
        } else if (is_prefix_of_any(block_, {dsml::kInvokeOpen, dsml::kInvokeOpenV4, dsml::kCallsClose,
                                             dsml::kCallsCloseV4})) {
          return;
        } else {
          return tools_failed(out);
        }
        break;
      case ToolState::kInvokeName: {
        const size_t p = block_.find("\">");
        const size_t bad = block_.find_first_of("\"<\n");
        if (p == std::string::npos) {
          if (block_.size() > 256 || (bad != std::string::npos && !(block_[bad] == '"' && bad + 1 == block_.size())))
            return tools_failed(out);
          return;
        }
        if (p == 0 || bad < p) return tools_failed(out);
        std::string name = block_.substr(0, p);
        block_.erase(0, p + 2);
        start_call(std::move(name), out);
        ts_ = ToolState::kBetweenParams;
        break;
      }
      case ToolState::kBetweenParams:
        skip_ws(&block_);
        if (block_.empty()) return;
        if (starts_with_any(block_, {dsml::kParamOpen, dsml::kParamOpenV4}, &tag)) {
          block_.erase(0, tag.size());
          ts_ = ToolState::kParamHeader;
        } else if (starts_with_any(block_, {dsml::kInvokeClose, dsml::kInvokeCloseV4}, &tag)) {
          block_.erase(0, tag.size());
          close_call(out);
          if (done()) return;
          ts_ = ToolState::kBetweenInvokes;
        } else if (is_prefix_of_any(block_, {dsml::kParamOpen, dsml::kParamOpenV4, dsml::kInvokeClose,
                                             dsml::kInvokeCloseV4})) {
          return;
        } else {
          return tools_failed(out);
        }
        break;
      case ToolState::kParamHeader: {
        // `KEY" string="true|false">` or `KEY">` (string missing = "true").
        const size_t p = block_.find("\">");
        if (p == std::string::npos) {
          if (block_.size() > 512 || block_.find_first_of("<\n") != std::string::npos) return tools_failed(out);
          return;
        }
        const std::string header = block_.substr(0, p);
        const size_t q = header.find('"');
        std::string key = header.substr(0, q);
        std::string is_string = "true";
        if (q != std::string::npos) {
          const std::string rest = header.substr(q);
          if (rest == "\" string=\"true") {
            is_string = "true";
          } else if (rest == "\" string=\"false") {
            is_string = "false";
          } else {
            return tools_failed(out);
          }
        }
        if (key.empty() || key.find_first_of("<\n") != std::string::npos) return tools_failed(out);
        block_.erase(0, p + 2);
        param_key_ = std::move(key);
        param_string_ = std::move(is_string);
        value_scanned_ = 0;
        ts_ = ToolState::kParamValue;
        break;
      }
      case ToolState::kParamValue: {
        // Search only the new bytes (plus a tag's length of overlap): long values stay linear.
        const size_t overlap = std::max(dsml::kParamClose.size(), dsml::kParamCloseV4.size());
        const size_t from = value_scanned_ > overlap ? value_scanned_ - overlap : 0;
        const Match m = earliest(std::string_view(block_).substr(from), {dsml::kParamClose, dsml::kParamCloseV4});
        if (m.pos == std::string::npos) {
          value_scanned_ = block_.size();
          return;  // the value runs on (taken raw)
        }
        const size_t close_at = from + m.pos;
        value_scanned_ = 0;
        const std::string value = block_.substr(0, close_at);
        block_.erase(0, close_at + m.len);
        std::string frag = call_.n_params == 0 ? "{" : ", ";
        json_dumps_string(param_key_, &frag);
        frag += ": ";
        if (param_string_ == "true") {
          json_dumps_string(value, &frag);
        } else {
          const Json v = parse_json_bounded(value);
          if (v.is_discarded()) {
            json_dumps_string(value, &frag);  // invalid (or too deeply nested) JSON: the raw text as a string
          } else {
            frag += json_dumps(v);
          }
        }
        ++call_.n_params;
        // DECISION: a duplicate key is streamed again and kept in the final string, so the fragments
        // always concatenate to `arguments`; JSON parsers then take the last value (§5 "last wins").
        call_.arguments += frag;
        Delta d;
        d.kind = Delta::Kind::kToolCallArguments;
        d.index = static_cast<int>(started_.size()) - 1;
        d.text = std::move(frag);
        out->push_back(std::move(d));
        ts_ = ToolState::kBetweenParams;
        break;
      }
    }
  }
}

void OutputParser::end(FinishReason r) {
  mode_ = Mode::kDone;
  finish_ = r;
}

void OutputParser::finish(bool length, std::vector<Delta>* out) {
  if (done()) return;
  if (length && mode_ == Mode::kTools) {
    // §5 / §7: max_tokens cut the block: the open call is dropped, the complete ones stay, and the
    // cut token's incomplete UTF-8 (U+FFFD once flushed) is markup or a value cut short, not a
    // reason to call the block unparseable and show it raw as content (break-in finding 5).
    end(FinishReason::kLength);
    return;
  }
  const std::string tail = decoder_.flush();
  if (!tail.empty()) push_some(tail, out);
  if (done()) return;
  if (mode_ == Mode::kTools && !length && calls_.empty()) {
    // The generation ended inside a block without one complete call: the block is unparseable.
    tools_failed(out);
    process(out);
    if (done()) return;
  }
  if (length && tools_enabled_ && (mode_ == Mode::kContent || mode_ == Mode::kReasoning)) {
    // max_tokens cut a tool-block start marker short: the held-back part is markup of a call that
    // will never complete, dropped like an incomplete call (§5) rather than shown as text.
    const std::vector<std::string_view> starts(std::begin(kToolStarts), std::end(kToolStarts));
    pending_.erase(pending_.size() - hold_length(pending_, starts));
  }
  if (mode_ == Mode::kReasoning) {
    emit(Delta::Kind::kReasoning, pending_, out);
  } else if (mode_ == Mode::kContent) {
    emit(Delta::Kind::kContent, pending_, out);
  }
  pending_.clear();
  end(length ? FinishReason::kLength : (calls_.empty() ? FinishReason::kStop : FinishReason::kToolCalls));
}

}  // namespace strata::chat
