// load_model_tokenizer and encode_chat_prompt.
#include "tokenizer/model_tokenizer.h"

#include <algorithm>

#include "io/gguf.h"
#include "tokenizer/gguf_vocab.h"

namespace lancet {
namespace {

StatusOr<GgufVocab> read_gguf_vocab(const GgufFile& f) {
  GgufVocab v;
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model.ok()) return InvalidArgument("GGUF has no tokenizer (tokenizer.ggml.model missing)");
  v.model = *model;
  if (auto pre = f.get_string("tokenizer.ggml.pre"); pre.ok()) v.pre = *pre;
  ASSIGN_OR_RETURN(v.tokens, f.get_string_array("tokenizer.ggml.tokens"));
  if (auto types = f.get_int_array("tokenizer.ggml.token_type"); types.ok()) {
    v.token_types.reserve(types->size());
    for (int64_t t : *types) v.token_types.push_back(static_cast<int32_t>(t));
  }
  if (auto merges = f.get_string_array("tokenizer.ggml.merges"); merges.ok()) v.merges = std::move(*merges);
  auto id = [&](const char* key, int64_t* out) {
    if (auto x = f.get_u32(key); x.ok()) *out = *x;
  };
  id("tokenizer.ggml.bos_token_id", &v.bos_id);
  id("tokenizer.ggml.eos_token_id", &v.eos_id);
  id("tokenizer.ggml.eot_token_id", &v.eot_id);
  id("tokenizer.ggml.padding_token_id", &v.pad_id);
  if (auto b = f.get_bool("tokenizer.ggml.add_bos_token"); b.ok()) v.add_bos = *b;
  return v;
}

struct SpecialHit {
  size_t pos;
  size_t len;
  int32_t id;
};

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> load_model_tokenizer(const ModelSource& source) {
  const TokenizerSource& ts = source.tokenizer();
  std::unique_ptr<Tokenizer> tok;
  if (!ts.tokenizer_json_path.empty()) {
    ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::from_json_file(ts.tokenizer_json_path));
    tok = std::make_unique<Tokenizer>(std::move(t));
  } else if (ts.from_gguf && source.gguf()) {
    ASSIGN_OR_RETURN(GgufVocab v, read_gguf_vocab(*source.gguf()));
    auto t = Tokenizer::from_gguf_vocab(v);
    if (!t.ok()) return t.status().with_context(source.path());
    tok = std::make_unique<Tokenizer>(std::move(*t));
  } else {
    return std::unique_ptr<Tokenizer>();
  }
  // The model config's ids win (generation_config.json's eos list is the engine's business).
  const ModelConfig& c = source.config();
  SpecialTokenIds ids = tok->special_ids();
  if (c.bos_token_id >= 0 && c.bos_token_id < tok->vocab_size()) ids.bos = static_cast<int32_t>(c.bos_token_id);
  if (ids.eos < 0 && !c.eos_token_ids.empty()) ids.eos = static_cast<int32_t>(c.eos_token_ids[0]);
  tok->set_special_ids(ids);
  return tok;
}

std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, std::string_view rendered,
                                        const std::vector<std::string>& contents,
                                        const ChatEncodeOptions& options) {
  if (options.hf_identical) return tokenizer.encode(rendered, EncodeOptions{.parse_special = true});

  // Spans of message content in the rendered text, in order.
  std::vector<std::pair<size_t, size_t>> spans;
  size_t cursor = 0;
  for (const std::string& c : contents) {
    if (c.empty()) continue;
    std::string_view cand = c;
    size_t pos = rendered.find(cand, cursor);
    if (pos == std::string_view::npos) {
      const size_t b = cand.find_first_not_of(" \t\r\n");
      const size_t e = cand.find_last_not_of(" \t\r\n");
      if (b == std::string_view::npos) continue;
      cand = cand.substr(b, e - b + 1);
      pos = rendered.find(cand, cursor);
    }
    if (pos == std::string_view::npos) continue;
    spans.emplace_back(pos, pos + cand.size());
    cursor = pos + cand.size();
  }
  auto inside_content = [&](size_t pos, size_t len) {
    for (const auto& [b, e] : spans)
      if (pos < e && pos + len > b) return true;
    return false;
  };

  // Special-token occurrences, leftmost first, longest at a position.
  std::vector<SpecialHit> hits;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) continue;
    const std::string_view s = tokenizer.token_bytes(id);
    if (s.empty()) continue;
    for (size_t p = rendered.find(s); p != std::string_view::npos; p = rendered.find(s, p + 1))
      hits.push_back({p, s.size(), id});
  }
  std::sort(hits.begin(), hits.end(), [](const SpecialHit& a, const SpecialHit& b) {
    return a.pos != b.pos ? a.pos < b.pos : a.len > b.len;
  });

  std::vector<int32_t> out;
  size_t done = 0;
  for (const SpecialHit& h : hits) {
    if (h.pos < done || inside_content(h.pos, h.len)) continue;
    if (h.pos > done) tokenizer.encode_into(rendered.substr(done, h.pos - done), EncodeOptions{}, &out);
    out.push_back(h.id);
    done = h.pos + h.len;
  }
  if (done < rendered.size()) tokenizer.encode_into(rendered.substr(done), EncodeOptions{}, &out);
  return out;
}

}  // namespace lancet

// ---- load_tokenizer_bundle ----
#include <filesystem>

#include "io/hf_config.h"
#include "io/text_file.h"

namespace lancet {

StatusOr<TokenizerBundle> load_tokenizer_bundle(const std::string& path) {
  namespace fs = std::filesystem;
  TokenizerBundle b;
  std::error_code ec;
  fs::path p(path);
  fs::path dir;
  if (fs::is_regular_file(p, ec) && p.extension() == ".json" && p.filename() != "config.json") {
    dir = p.parent_path();
  } else if (fs::is_directory(p, ec) && fs::exists(p / "tokenizer.json") && !fs::exists(p / "config.json")) {
    dir = p;
    p = p / "tokenizer.json";
  }
  if (!dir.empty() || (fs::is_regular_file(p, ec) && p.extension() == ".json" && p.filename() != "config.json")) {
    ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::from_json_file(p.string()));
    b.tokenizer = std::make_unique<Tokenizer>(std::move(t));
    const fs::path cfg = dir / "tokenizer_config.json";
    if (fs::exists(cfg)) {
      ASSIGN_OR_RETURN(std::string text, read_text_file(cfg.string()));
      TokenizerSource ts;
      RETURN_IF_ERROR(parse_tokenizer_config(text, cfg.string(), &ts));
      b.chat_template = ts.chat_template;
      b.bos_token = ts.bos_token;
      b.eos_token = ts.eos_token;
    }
    return b;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> src, open_model_source(path));
  ASSIGN_OR_RETURN(b.tokenizer, load_model_tokenizer(*src));
  if (!b.tokenizer) return NotFound(path + " has no tokenizer (no tokenizer.json, no GGUF vocabulary)");
  b.chat_template = src->tokenizer().chat_template;
  b.bos_token = src->tokenizer().bos_token;
  b.eos_token = src->tokenizer().eos_token;
  const SpecialTokenIds& ids = b.tokenizer->special_ids();
  if (b.bos_token.empty() && ids.bos >= 0) b.bos_token = std::string(b.tokenizer->token_bytes(ids.bos));
  if (b.eos_token.empty() && ids.eos >= 0) b.eos_token = std::string(b.tokenizer->token_bytes(ids.eos));
  return b;
}

}  // namespace lancet
