// Batch input parsing and result lines (see batch_lines.h).
#include "server/batch_lines.h"

namespace lancet::server {

bool is_batch_endpoint(std::string_view url) { return url == "/v1/chat/completions" || url == "/v1/completions"; }

namespace {

LineError line_error(std::string code, std::string message) {
  LineError e;
  e.code = std::move(code);
  e.message = std::move(message);
  return e;
}

std::optional<LineError> parse_line(std::string_view line, std::string_view endpoint, const RequestLimits& limits,
                                    BatchLine* out) {
  out->custom_id.clear();
  nlohmann::json j;
  if (auto e = parse_json_object(line, limits, &j)) return line_error("invalid_json", e->message);
  if (auto it = j.find("custom_id"); it != j.end() && it->is_string()) out->custom_id = it->get<std::string>();
  if (out->custom_id.empty()) return line_error("missing_custom_id", "the line has no custom_id string");
  if (out->custom_id.size() > 512) {
    out->custom_id.resize(512);
    return line_error("invalid_custom_id", "custom_id is longer than 512 bytes");
  }
  auto method = j.find("method");
  if (method == j.end() || !method->is_string() || *method != "POST")
    return line_error("invalid_method", "method must be \"POST\"");
  auto url = j.find("url");
  if (url == j.end() || !url->is_string()) return line_error("invalid_url", "the line has no url string");
  out->url = url->get<std::string>();
  if (endpoint.empty() && !is_batch_endpoint(out->url))
    return line_error("invalid_url", "url must be '/v1/chat/completions' or '/v1/completions', not '" +
                                        out->url.substr(0, 128) + "'");
  if (!endpoint.empty() && out->url != endpoint)
    return line_error("mismatched_endpoint", "the line's url '" + out->url.substr(0, 128) +
                                                "' is not the batch's endpoint '" + std::string(endpoint) + "'");
  auto body = j.find("body");
  if (body == j.end() || !body->is_object()) return line_error("invalid_body", "body must be a JSON object");
  if (auto s = body->find("stream"); s != body->end() && s->is_boolean() && s->get<bool>())
    return line_error("invalid_body", "stream is not supported in a batch");
  out->body = body->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return std::nullopt;
}

}  // namespace

std::optional<LineError> parse_batch_line(std::string_view line, std::string_view endpoint,
                                          const RequestLimits& limits, BatchLine* out) {
  auto err = parse_line(line, endpoint, limits, out);
  if (err) err->custom_id = out->custom_id;
  return err;
}

std::vector<NumberedLine> split_jsonl(std::string_view input) {
  std::vector<NumberedLine> lines;
  int64_t number = 0;
  size_t pos = 0;
  while (pos < input.size()) {
    size_t end = input.find('\n', pos);
    if (end == std::string_view::npos) end = input.size();
    ++number;
    std::string_view text = input.substr(pos, end - pos);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.find_first_not_of(" \t") != std::string_view::npos) lines.push_back({number, text});
    pos = end + 1;
  }
  return lines;
}

std::string response_line(const std::string& custom_id, int status_code, const std::string& request_id,
                          const Json& body) {
  Json j;
  j["id"] = new_response_id("batch_req_");
  j["custom_id"] = custom_id;
  j["response"] = {{"status_code", status_code}, {"request_id", request_id}, {"body", body}};
  j["error"] = nullptr;
  return dump_json(j);
}

std::string line_error_line(const LineError& err) {
  const std::string& custom_id = err.custom_id;
  Json j;
  j["id"] = new_response_id("batch_req_");
  j["custom_id"] = custom_id.empty() ? Json(nullptr) : Json(custom_id);
  j["response"] = nullptr;
  j["error"] = {{"code", err.code}, {"message", err.message}};
  return dump_json(j);
}

}  // namespace lancet::server
