// POST /v1/lancet/documents (documents_api.h).
#include "server/documents_api.h"
#include "server/model_names.h"

#include <chrono>
#include <cstdio>
#include <set>

#include "documents/document_answer.h"
#include "engine/async_engine.h"
#include "structured/output_format.h"

namespace lancet::server {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kClientCheck{100};

struct DocBody {
  std::string task, question, text, pdf_base64;
  nlohmann::json schema;
  Json schema_ordered;  // as written: the grammar emits properties in this order
  bool has_text = false, has_pdf = false;
  int64_t max_tokens = 256, block_tokens = 128;
  std::string model;
};

std::optional<ApiError> read_string(const Json& obj, const char* key, std::string* out, bool* present = nullptr) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return bad_request(std::string("'") + key + "' must be a string", key);
  *out = it->get<std::string>();
  if (present) *present = true;
  return std::nullopt;
}

std::optional<ApiError> read_int(const Json& obj, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi)
    return bad_request(std::string("'") + key + "' must be an integer from " + std::to_string(lo) + " to " +
                           std::to_string(hi),
                       key);
  *out = it->get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> parse_body(const std::string& body, int64_t max_model_len, DocBody* b) {
  const Json obj = Json::parse(body, nullptr, false);
  if (obj.is_discarded() || !obj.is_object()) return bad_request("the body must be a JSON object");
  static const std::set<std::string> kFields = {"task",       "question",   "schema",       "text",
                                                "pdf_base64", "max_tokens", "block_tokens", "model"};
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (kFields.count(it.key())) continue;
    const std::string field = it.key().substr(0, 64);
    return bad_request(std::string("'").append(field).append("' is not a field of this route; see docs/API.md"), field);
  }
  if (auto e = read_string(obj, "task", &b->task)) return e;
  if (b->task.empty()) return bad_request("'task' is required: summarize, ask or extract", "task");
  if (auto e = read_string(obj, "question", &b->question)) return e;
  if (auto e = read_string(obj, "text", &b->text, &b->has_text)) return e;
  if (auto e = read_string(obj, "pdf_base64", &b->pdf_base64, &b->has_pdf)) return e;
  if (auto e = read_string(obj, "model", &b->model)) return e;
  if (b->has_text == b->has_pdf) return bad_request("give the document as exactly one of 'text' and 'pdf_base64'", "text");
  if (auto it = obj.find("schema"); it != obj.end() && !it->is_null()) {
    if (!it->is_object()) return bad_request("'schema' must be a JSON Schema object", "schema");
    b->schema = *it;
    b->schema_ordered = *it;
  }
  if (auto e = read_int(obj, "max_tokens", 1, max_model_len, &b->max_tokens)) return e;
  return read_int(obj, "block_tokens", 16, 8192, &b->block_tokens);
}

// The answer's text, greedy; 408 past the deadline, 499 when the client left (both cancel).
std::optional<ApiError> generate(ServingModel* m, const GenerationRequest& g, const DocumentsOptions& opt,
                                 std::string* text, int64_t* tokens, FinishReason* finish) {
  auto s = m->engine().submit(g);
  if (!s.ok()) return server_error(503, s.status().message(), "service_unavailable");
  std::shared_ptr<RequestStream> stream = *s;
  const Clock::time_point deadline =
      opt.timeout_s > 0
          ? Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.timeout_s))
          : Clock::time_point::max();
  TokenEvent ev;
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline || (opt.client_gone && opt.client_gone())) {
      stream->cancel();
      if (now < deadline) return ApiError{499, "the client closed the connection", "client_closed_request", "", ""};
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", opt.timeout_s);
      return ApiError{408, std::string("the request did not finish within the server's timeout (--timeout ") + secs +
                               " s); it was aborted",
                      "timeout_error", "", "timeout"};
    }
    switch (stream->next_until(&ev, std::min(deadline, now + kClientCheck))) {
      case RequestStream::Wait::kEvent:
        *text += ev.text;
        if (ev.token >= 0) ++*tokens;
        if (ev.finished) *finish = ev.finish_reason;
        if (ev.finished && ev.finish_reason == FinishReason::kError)
          return server_error(500, "the model failed while answering this request", "internal_error");
        break;
      case RequestStream::Wait::kEnded: return std::nullopt;
      case RequestStream::Wait::kTimedOut: break;
    }
  }
}

}  // namespace

std::optional<std::string> decode_base64(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      padding = true;
      continue;
    }
    const int v = value(c);
    if (v < 0 || padding) return std::nullopt;  // a foreign byte, or data after the padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xffu));
    }
  }
  if (bits >= 6) return std::nullopt;  // a lone sextet is no whole byte
  return out;
}

std::optional<ApiError> answer_document(ServingModel* m, const std::string& body, const DocumentsOptions& opt,
                                        Json* response) {
  if (!m->has_chat_template()) return bad_request("documents need the model's tokenizer and chat template");
  DocBody b;
  if (auto e = parse_body(body, m->max_model_len(), &b)) return e;
  std::shared_ptr<const LoraRef> lora;
  if (auto e = resolve_model(*m, b.model, &lora)) return e;
  auto req = documents::make_doc_request(b.task, b.question, b.schema);
  if (!req.ok()) return bad_request(req.status().message(), b.task == "extract" ? "schema" : "task");
  std::string bytes = std::move(b.text);
  if (b.has_pdf) {
    auto decoded = decode_base64(b.pdf_base64);
    if (!decoded) return bad_request("'pdf_base64' is not base64", "pdf_base64");
    bytes = std::move(*decoded);
  }
  auto doc = documents::parse_document(std::move(bytes), b.has_pdf ? "pdf_base64" : "text");
  if (!doc.ok()) return bad_request(doc.status().message(), b.has_pdf ? "pdf_base64" : "text");
  documents::DocModel dm;
  dm.count_tokens = [m](const std::string& t) {
    auto ids = m->encode(t, false);
    return ids.ok() ? static_cast<int64_t>(ids->size()) : int64_t{0};
  };
  dm.encode_chat = [m](const nlohmann::ordered_json& msgs) { return m->encode_chat(msgs, ChatEnding{}); };
  dm.max_model_len = m->max_model_len();
  auto prompt = documents::build_document_prompt(*doc, *req, b.block_tokens, b.max_tokens, dm);
  if (!prompt.ok())
    return prompt.status().code() == StatusCode::kOutOfRange
               ? bad_request(prompt.status().message(), "text", "context_length_exceeded")
               : bad_request(prompt.status().message(), b.has_pdf ? "pdf_base64" : "text");
  GenerationRequest g;
  g.prompt = prompt->ids;
  g.lora = lora;
  g.params.temperature = 0.0f;
  g.params.max_tokens = static_cast<int32_t>(b.max_tokens);
  if (req->task == documents::DocTask::kExtract) {
    structured::ConstraintCache* so = m->structured_outputs();
    if (!so) return bad_request("extract needs the model's tokenizer, which this model lacks", "schema");
    structured::OutputFormat fmt;
    fmt.kind = structured::OutputFormat::Kind::kJsonSchema;
    fmt.schema = b.schema_ordered;
    auto c = so->constraint(fmt);
    if (!c.ok()) return bad_request("'schema': " + c.status().message(), "schema");
    g.params.constraint = *c;
  }
  std::string answer;
  int64_t completion_tokens = 0;
  FinishReason finish = FinishReason::kNone;
  if (auto e = generate(m, g, opt, &answer, &completion_tokens, &finish)) return e;
  bool valid = true;
  Json j = documents::document_result(prompt->blocks, answer, *req, static_cast<int64_t>(prompt->ids.size()), &valid);
  j["object"] = "lancet.document";
  j["model"] = lora ? lora->name : m->name();
  j["finish_reason"] = finish_reason_name(finish);
  const int64_t prompt_tokens = static_cast<int64_t>(prompt->ids.size());
  j["usage"] = {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens}};
  *response = std::move(j);
  return std::nullopt;
}

}  // namespace lancet::server
