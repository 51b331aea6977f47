// /v1/embeddings request parsing and response building (see openai_embeddings.h).
#include "server/openai_embeddings.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace lancet::server {
namespace {

using nlohmann::json;
using Err = std::optional<ApiError>;

const char* kInputShape = "'input' must be a string, a list of strings, a list of token ids or a list of such lists";

Err token_ids(const json& v, std::vector<int32_t>* out) {
  if (!v.is_array() || v.empty()) return bad_request("'input' token lists must be non-empty lists of token ids", "input");
  for (const json& t : v) {
    const bool integral = t.is_number_integer() || t.is_number_unsigned() ||
                          (t.is_number_float() && std::isfinite(t.get<double>()) &&
                           t.get<double>() == std::floor(t.get<double>()));
    if (!integral) return bad_request("'input' token ids must be integers", "input");
    const double d = t.get<double>();
    if (d < 0 || d > static_cast<double>(std::numeric_limits<int32_t>::max()))
      return bad_request("'input' token ids must be in [0, 2147483647]", "input");
    out->push_back(static_cast<int32_t>(d));
  }
  return std::nullopt;
}

Err parse_input(const json& obj, const RequestLimits& lim, EmbeddingRequest* r) {
  auto it = obj.find("input");
  if (it == obj.end() || it->is_null()) return bad_request("'input' is required", "input");
  const json& in = *it;
  if (in.is_string()) {
    r->texts.push_back(in.get<std::string>());
  } else if (!in.is_array() || in.empty()) {
    return bad_request(kInputShape, "input");
  } else if (in[0].is_number()) {
    r->token_inputs.emplace_back();
    if (auto e = token_ids(in, &r->token_inputs.back())) return e;
  } else {
    if (in.size() > static_cast<size_t>(lim.max_prompts))
      return bad_request("'input' may hold at most " + std::to_string(lim.max_prompts) + " entries", "input");
    for (const json& x : in) {
      if (in[0].is_string() && x.is_string()) {
        r->texts.push_back(x.get<std::string>());
      } else if (in[0].is_array() && x.is_array()) {
        r->token_inputs.emplace_back();
        if (auto e = token_ids(x, &r->token_inputs.back())) return e;
      } else {
        return bad_request(kInputShape + std::string(" (all entries of one kind)"), "input");
      }
    }
  }
  for (const std::string& t : r->texts)
    if (t.empty()) return bad_request("'input' strings must not be empty", "input");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_embedding_request(std::string_view body, const RequestLimits& limits,
                                                EmbeddingRequest* out) {
  json obj;
  if (auto e = parse_json_object(body, limits, &obj)) return e;
  *out = EmbeddingRequest{};
  if (auto it = obj.find("model"); it != obj.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'model' must be a string", "model");
    out->model = it->get<std::string>();
  }
  if (auto e = parse_input(obj, limits, out)) return e;
  if (auto it = obj.find("encoding_format"); it != obj.end() && !it->is_null()) {
    const std::string f = it->is_string() ? it->get<std::string>() : "";
    if (f != "float" && f != "base64")
      return bad_request("'encoding_format' must be 'float' or 'base64'", "encoding_format");
    out->base64 = f == "base64";
  }
  // Shortened embeddings (Matryoshka models) are not what a Llama's pooled state is.
  if (auto it = obj.find("dimensions"); it != obj.end() && !it->is_null())
    return bad_request("'dimensions' is not supported by this server (embeddings have the model's hidden size)",
                       "dimensions");
  if (auto it = obj.find("user"); it != obj.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'user' must be a string", "user");
    out->user = it->get<std::string>();
  }
  return std::nullopt;
}

std::string floats_base64(const std::vector<float>& v) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u = std::bit_cast<uint32_t>(v[i]);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<char>((u >> (8 * b)) & 0xff);  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t chunk = 0;
    for (size_t k = 0; k < 3; ++k)
      chunk = (chunk << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(chunk >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

Json embeddings_response_json(const std::string& model, const std::vector<std::vector<float>>& embeddings,
                              bool base64, int64_t prompt_tokens) {
  Json data = Json::array();
  for (size_t i = 0; i < embeddings.size(); ++i) {
    Json e;
    e["object"] = "embedding";
    e["index"] = i;
    if (base64) e["embedding"] = floats_base64(embeddings[i]);
    else e["embedding"] = embeddings[i];
    data.push_back(std::move(e));
  }
  Json out;
  out["object"] = "list";
  out["data"] = std::move(data);
  out["model"] = model;
  out["usage"] = {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}};
  return out;
}

}  // namespace lancet::server
