#include "server/structured_output.h"

namespace strata::server {

namespace {

// "path.to.keyword: message" -> the param "path.to.keyword".
ApiError schema_error(const Status& st) {
  const std::string& m = st.message();
  const size_t colon = m.find(": ");
  return bad_request(m, colon == std::string::npos ? std::string() : m.substr(0, colon));
}

}  // namespace

ApiError request_grammar(const chat::RenderOptions& r, RequestGrammar* out) {
  *out = RequestGrammar{};
  if (r.tool_choice == chat::ToolChoice::kRequired || r.tool_choice == chat::ToolChoice::kNamed) {
    std::vector<runtime::DsmlTool> tools;
    std::string path = "tools";
    for (size_t i = 0; i < r.tools.size(); ++i) {
      const chat::Json& f = r.tools[i];
      const std::string name = f.value("name", std::string());
      if (r.tool_choice == chat::ToolChoice::kNamed && name != r.tool_choice_name) continue;
      tools.push_back(runtime::DsmlTool{name, f.contains("parameters") ? f["parameters"] : chat::Json()});
      if (r.tool_choice == chat::ToolChoice::kNamed) {
        path = "tools[" + std::to_string(i) + "]";
        break;
      }
    }
    if (tools.empty()) return {};
    // Paths: "tools[i].function.parameters..."; for a named tool the one index is in `path`.
    auto g = r.tool_choice == chat::ToolChoice::kNamed ? runtime::JsonGrammar::dsml_call(tools, true, "tools")
                                                       : runtime::JsonGrammar::dsml_call(tools, false, path);
    if (!g.ok()) {
      Status st = g.error();
      if (r.tool_choice == chat::ToolChoice::kNamed) {
        std::string m = st.message();
        m.replace(0, std::string("tools[0]").size(), path);
        st = InvalidArgument(m);
      }
      return schema_error(st);
    }
    out->grammar = std::make_shared<const runtime::JsonGrammar>(std::move(*g));
    return {};
  }
  const chat::Json& rf = r.response_format;
  if (!rf.is_object()) return {};
  const std::string type = rf.value("type", std::string());
  if ((type == "json_object" || type == "json_schema") && !r.tools.empty() && r.tool_choice == chat::ToolChoice::kAuto)
    // DECISION: the grammar binds the answer from its first token, so with tool_choice "auto" a
    // tool call could never be written; refused rather than silently never calling a tool.
    return bad_request(
        "response_format (text.format on /v1/responses) with tools needs tool_choice \"none\" (the answer "
        "follows the schema) or \"required\" / a named tool (a forced call, whose arguments follow the tool's "
        "parameters; response_format is then not applied): with \"auto\" the model could not call a tool",
        "tool_choice");
  out->after_thinking = r.thinking;
  if (type == "json_object") {
    out->grammar = std::make_shared<const runtime::JsonGrammar>(runtime::JsonGrammar::any_object());
    return {};
  }
  if (type != "json_schema") return {};
  if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
    return bad_request("response_format.json_schema: expected an object {\"name\", \"schema\", \"strict\"}",
                       "response_format.json_schema");
  const chat::Json& js = rf["json_schema"];
  if (!js.contains("schema")) {  // no schema: any JSON object, as json_object
    out->grammar = std::make_shared<const runtime::JsonGrammar>(runtime::JsonGrammar::any_object());
    return {};
  }
  auto g = runtime::JsonGrammar::from_schema(js["schema"], "response_format.json_schema.schema");
  if (!g.ok()) return schema_error(g.error());
  out->grammar = std::make_shared<const runtime::JsonGrammar>(std::move(*g));
  return {};
}

std::vector<std::string> grammar_token_bytes(const tokenizer::Tokenizer& tok) {
  const int32_t dsml_id = tok.token_to_id("｜DSML｜").value_or(-1);
  std::vector<std::string> out(static_cast<size_t>(tok.vocab_size()));
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_special(id) || (tok.is_added(id) && id != dsml_id)) continue;
    out[static_cast<size_t>(id)] = std::string(tok.token_bytes(id));
  }
  return out;
}

}  // namespace strata::server
