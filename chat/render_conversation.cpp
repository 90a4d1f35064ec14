// The full V4.1 renderer (chat-and-api.md §2.5, §3, §4). Reads top to bottom as the spec: merge
// turns, attach tools / response_format, then one render step per turn and the header rule.
#include <algorithm>
#include <map>
#include <optional>

#include "chat/dsml.h"
#include "chat/prompt_builder.h"
#include "chat/render.h"

namespace strata::chat {

namespace {

// One part of a user turn: text, or a tool result (with the id it answers, for reordering).
struct Part {
  std::string text;
  bool tool_result = false;
  std::string tool_call_id;
};

// A message after §2.5 merging: tool messages live inside user turns.
struct Turn {
  Role role = Role::kUser;  // kSystem, kUser or kAssistant
  std::vector<Part> parts;  // user
  const Message* msg = nullptr;  // system / assistant: the source message (null for an inserted system)
  bool tools = false;            // system: the TOOLS BLOCK is attached here
  bool response_format = false;  // system: the response format is attached here
};

// Writes every piece twice: as text (the golden form) and into the PromptBuilder (the ids).
class Out {
 public:
  explicit Out(const tokenizer::Tokenizer& tok) : b_(tok) {}
  void special(std::string_view t) {
    text_ += t;
    if (Status s = b_.special(t); !s.ok() && status_.ok()) status_ = s;
  }
  void templ(std::string_view t) {
    text_ += t;
    b_.template_text(t);
  }
  void client(std::string_view t) {
    text_ += t;
    b_.client_text(t);
  }
  Status status() const { return status_; }
  std::string& text() { return text_; }
  const std::vector<int32_t>& ids() { return b_.ids(); }

 private:
  PromptBuilder b_;
  std::string text_;
  Status status_;
};

std::string effort_line(int effort) {
  return "Reasoning Effort: " + std::to_string(effort) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

// §2.5: tool messages become <tool_result> parts of a user turn; a user or tool message that follows
// a user turn is merged into it. Then tool results are reordered to the order of the latest
// assistant tool_calls (unknown ids take position 0 and keep their order, as the official
// sort_tool_results_by_call_order does).
Result<std::vector<Turn>> merge_turns(std::span<const Message> messages) {
  std::vector<Turn> turns;
  bool seen_calls = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.role == Role::kTool || m.role == Role::kUser) {
      if (m.role == Role::kTool && !seen_calls)
        return InvalidArgument("messages[" + std::to_string(i) +
                               "]: a tool message must follow an assistant message with tool_calls");
      Part p;
      p.text = m.content;
      p.tool_result = m.role == Role::kTool;
      p.tool_call_id = m.tool_call_id;
      if (turns.empty() || turns.back().role != Role::kUser) turns.push_back(Turn{Role::kUser, {}, nullptr});
      turns.back().parts.push_back(std::move(p));
    } else {
      if (m.role == Role::kAssistant && !m.tool_calls.empty()) seen_calls = true;
      Turn t;
      t.role = m.role;
      t.msg = &m;
      turns.push_back(std::move(t));
    }
  }
  std::map<std::string, size_t> order;
  for (Turn& t : turns) {
    if (t.role == Role::kAssistant && !t.msg->tool_calls.empty()) {
      order.clear();
      for (size_t k = 0; k < t.msg->tool_calls.size(); ++k)
        if (!t.msg->tool_calls[k].id.empty()) order.emplace(t.msg->tool_calls[k].id, k);
    } else if (t.role == Role::kUser && !order.empty()) {
      std::vector<Part> results;
      for (const Part& p : t.parts)
        if (p.tool_result) results.push_back(p);
      if (results.size() < 2) continue;
      auto key = [&](const Part& p) {
        auto it = order.find(p.tool_call_id);
        return it == order.end() ? size_t{0} : it->second;
      };
      std::stable_sort(results.begin(), results.end(), [&](const Part& a, const Part& b) { return key(a) < key(b); });
      size_t r = 0;
      for (Part& p : t.parts)
        if (p.tool_result) p = results[r++];
    }
  }
  return turns;
}

// §4 rule 5: one historical tool call as a DSML invoke.
void render_invoke(const ToolCall& tc, Out& o) {
  o.templ(dsml::kInvokeOpen);
  o.client(tc.name);
  o.templ("\">\n");
  bool first = true;
  if (tc.arguments.is_object()) {
    for (auto it = tc.arguments.begin(); it != tc.arguments.end(); ++it) {
      if (!first) o.templ("\n");
      first = false;
      o.templ(dsml::kParamOpen);
      o.client(it.key());
      if (it->is_string()) {
        o.templ("\" string=\"true\">");
        o.client(it->get_ref<const std::string&>());
      } else {
        o.templ("\" string=\"false\">");
        o.client(json_dumps(*it));
      }
      o.templ(dsml::kParamClose);
    }
  }
  o.templ("\n");
  o.templ(dsml::kInvokeClose);
}

}  // namespace

Result<RenderedPrompt> render_conversation(const tokenizer::Tokenizer& tokenizer, std::span<const Message> messages,
                                           const RenderOptions& opt) {
  STRATA_RETURN_IF_ERROR(opt.validate());
  if (messages.empty()) return InvalidArgument("messages: at least one message is required");
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.prefix && (m.role != Role::kAssistant || i + 1 != messages.size()))
      return InvalidArgument("messages[" + std::to_string(i) +
                             "]: only the last message may be an assistant continuation (prefix)");
  }
  const Message& last = messages.back();
  const bool continuation = last.role == Role::kAssistant && last.prefix;
  if (continuation && !last.tool_calls.empty())
    return InvalidArgument("messages[" + std::to_string(messages.size() - 1) +
                           "]: an assistant continuation (prefix) cannot have tool_calls");
  if (opt.add_generation_prompt && last.role == Role::kAssistant && !continuation)
    return InvalidArgument("messages[" + std::to_string(messages.size() - 1) +
                           "]: the last message is an assistant message; set \"prefix\": true on it (or "
                           "continue_final_message) to continue it, or end with a user message");

  // §2.3-2.4: which tools are rendered, and where tools / response_format attach.
  std::vector<const Json*> tools;
  if (opt.tool_choice != ToolChoice::kNone)
    for (const Json& f : opt.tools)
      if (opt.tool_choice != ToolChoice::kNamed || f.value("name", std::string()) == opt.tool_choice_name)
        tools.push_back(&f);
  const bool has_rf = opt.response_format.is_object();
  STRATA_ASSIGN_OR_RETURN(std::vector<Turn> turns, merge_turns(messages));
  if (!tools.empty() || has_rf) {
    if (turns.front().role != Role::kSystem) turns.insert(turns.begin(), Turn{Role::kSystem, {}, nullptr});
    turns.front().tools = !tools.empty();
    turns.front().response_format = has_rf;
  }

  const bool T = opt.thinking;
  const bool D = opt.drop_thinking && tools.empty();  // §3: never drop reasoning when tools are rendered
  const int n = static_cast<int>(turns.size());
  int L = -1;  // the last user turn, or system turn at index > 0
  for (int i = n - 1; i >= 0; --i)
    if (turns[i].role == Role::kUser || (turns[i].role == Role::kSystem && i > 0)) {
      L = i;
      break;
    }

  Out o(tokenizer);
  o.special(dsml::kBos);
  std::string header_end;  // what the final header wrote: <think> or </think>
  for (int i = 0; i < n; ++i) {
    const Turn& t = turns[i];
    // Rules 1-2: the effort line and the leading <｜System｜>.
    if (i == 0 && (T || t.role == Role::kSystem)) o.special(dsml::kSystem);
    if (i == 0 && T) o.templ(effort_line(opt.reasoning_effort));
    switch (t.role) {
      case Role::kSystem:  // rule 3
        if (i > 0) o.special(dsml::kSystem);
        if (t.msg) o.client(t.msg->content);
        if (t.tools) {
          o.templ("\n\n");
          o.templ(dsml::kToolsHeader);
          for (size_t k = 0; k < tools.size(); ++k) {
            if (k > 0) o.templ("\n");
            o.client(json_dumps(*tools[k]));
          }
          o.templ(dsml::kToolsFooter);
        }
        if (t.response_format) {
          o.templ("\n\n");
          o.templ(dsml::kResponseFormatHeader);
          o.client(json_dumps(opt.response_format));
        }
        break;
      case Role::kUser:  // rule 4
        o.special(dsml::kUser);
        for (size_t k = 0; k < t.parts.size(); ++k) {
          if (k > 0) o.templ("\n\n");
          if (t.parts[k].tool_result) o.templ("<tool_result>");
          o.client(t.parts[k].text);
          if (t.parts[k].tool_result) o.templ("</tool_result>");
        }
        break;
      case Role::kAssistant: {  // rule 5
        const Message& m = *t.msg;
        const bool is_cont = continuation && i == n - 1;
        if (T && (!D || i > L)) {
          o.client(m.reasoning);
          // DECISION: chat-and-api.md §2.6 — a continuation without content leaves <think> open.
          if (!(is_cont && m.content.empty())) o.special(dsml::kThinkClose);
        }
        o.client(m.content);
        if (!m.tool_calls.empty()) {
          o.templ("\n\n");
          o.templ(dsml::kCallsOpen);
          o.templ("\n");
          for (size_t k = 0; k < m.tool_calls.size(); ++k) {
            if (k > 0) o.templ("\n");
            render_invoke(m.tool_calls[k], o);
          }
          o.templ("\n");
          o.templ(dsml::kCallsClose);
        }
        if (!is_cont) o.special(dsml::kEos);
        break;
      }
      case Role::kTool:
        break;  // merged into user turns above
    }
    // Rule 6: the assistant header.
    if (i + 1 < n && turns[i + 1].role != Role::kAssistant) continue;
    if (i + 1 == n && !opt.add_generation_prompt) continue;
    const bool wants_header = t.role == Role::kUser || (t.role == Role::kSystem && (i > 0 || i + 1 == n));
    if (!wants_header) continue;
    o.special(dsml::kAssistant);
    header_end = (T && (!D || i >= L)) ? dsml::kThinkOpen : dsml::kThinkClose;
    o.special(header_end);
  }

  RenderedPrompt out;
  out.tools_rendered = !tools.empty();
  if (continuation) {
    out.start = (T && last.content.empty()) ? ParseStart::kReasoning : ParseStart::kContent;
  } else {
    out.start = header_end == dsml::kThinkOpen ? ParseStart::kReasoning : ParseStart::kContent;
  }
  // Rule 7: a forced tool call opens the block (and the named invoke) after the final header.
  if (opt.add_generation_prompt && !continuation &&
      (opt.tool_choice == ToolChoice::kRequired || opt.tool_choice == ToolChoice::kNamed)) {
    o.templ("\n\n");
    o.templ(dsml::kCallsOpen);
    o.templ("\n");
    if (opt.tool_choice == ToolChoice::kNamed) {
      o.templ(dsml::kInvokeOpen);
      o.client(opt.tool_choice_name);
      o.templ("\">\n");
      out.forced_tool = opt.tool_choice_name;
    }
    out.start = ParseStart::kTools;
  }
  STRATA_RETURN_IF_ERROR(o.status());
  out.ids = o.ids();
  out.text = std::move(o.text());
  return out;
}

}  // namespace strata::chat
