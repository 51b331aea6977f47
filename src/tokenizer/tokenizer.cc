// Tokenizer: assembling the state from a TokenizerSpec, encode, batch encode and decode.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "core/thread_pool.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_state.h"
#include "tokenizer/utf8.h"

namespace lancet {
namespace {

// HF ByteLevel decoder: a token whose characters are all in the byte map stands for those bytes;
// any other token (e.g. an added token with a space) stands for its own UTF-8 text.
std::string decoder_bytes(const std::string& token) {
  std::string bytes;
  if (byte_level_decode(token, &bytes)) return bytes;
  return token;
}

}  // namespace

StatusOr<Tokenizer> build_tokenizer(TokenizerSpec spec) {
  auto state = std::make_shared<TokenizerState>();
  state->source = spec.source;
  const std::string& src = spec.source;

  int32_t max_id = -1;
  for (const auto& [text, id] : spec.vocab) max_id = std::max(max_id, id);
  for (const AddedToken& t : spec.added) max_id = std::max(max_id, t.id);
  if (max_id < 0) return InvalidArgument(src + ": empty vocabulary");
  if (max_id >= (1 << 30)) return InvalidArgument(src + ": token id " + std::to_string(max_id) +
                                                  " is out of range");
  const size_t n = static_cast<size_t>(max_id) + 1;
  std::vector<std::string> id_bytes(n);  // packed into state->id_blob at the end
  state->has_id.assign(n, 0);
  state->special.assign(n, 0);

  BpeModelConfig bpe;
  bpe.source = src;
  bpe.ignore_merges = spec.ignore_merges;
  bpe.vocab.reserve(spec.vocab.size());
  std::string bytes;
  for (size_t i = 0; i < spec.vocab.size(); ++i) {
    const auto& [text, id] = spec.vocab[i];
    if (id < 0) return InvalidArgument(src + ": negative id for vocab entry '" + text + "'");
    if (text.empty()) return InvalidArgument(src + ": empty vocab entry for id " +
                                             std::to_string(id));
    state->has_id[id] = 1;
    id_bytes[id] = decoder_bytes(text);
    state->by_text.emplace(text, id);
    const bool excluded = !spec.exclude_from_bpe.empty() && spec.exclude_from_bpe[i];
    // Entries outside the byte map can never be produced by byte-level BPE.
    if (!excluded && byte_level_decode(text, &bytes)) bpe.vocab.emplace_back(bytes, id);
  }
  bpe.merges.reserve(spec.merges.size());
  std::string left, right;
  for (const auto& [a, b] : spec.merges) {
    if (!byte_level_decode(a, &left) || !byte_level_decode(b, &right)) {
      left.clear();  // keeps the rank; the empty part is not in the vocab, so it is skipped
      right.clear();
    }
    bpe.merges.emplace_back(left, right);
  }
  ASSIGN_OR_RETURN(state->bpe, BpeModel::build(bpe));

  for (const AddedToken& t : spec.added) {
    if (t.id < 0) return InvalidArgument(src + ": negative id for added token '" + t.content + "'");
    if (t.content.empty()) continue;
    state->has_id[t.id] = 1;
    state->special[t.id] = t.special ? 1 : 0;
    // Added tokens decode as their content (through the same ByteLevel rule), even when the
    // vocab spells the id differently.
    id_bytes[t.id] = decoder_bytes(t.content);
    state->by_text[t.content] = t.id;
  }
  ASSIGN_OR_RETURN(state->added, AddedTokenMatcher::build(spec.added));

  for (const std::string& pattern : spec.split_patterns) {
    auto re = Pcre2Regex::compile(pattern);
    if (!re.ok()) return re.status().with_context(src);
    state->pre.add_split(std::move(re).value());
  }

  size_t blob = 0;
  for (const std::string& b : id_bytes) blob += b.size();
  if (blob > UINT32_MAX) return InvalidArgument(src + ": the vocabulary's bytes exceed 4 GiB");
  state->id_blob.reserve(blob);
  state->id_offset.reserve(n + 1);
  state->id_offset.push_back(0);
  for (const std::string& b : id_bytes) {
    state->id_blob += b;
    state->id_offset.push_back(static_cast<uint32_t>(state->id_blob.size()));
  }

  for (int32_t* id : {&spec.ids.bos, &spec.ids.eos, &spec.ids.eot, &spec.ids.pad}) {
    if (*id >= static_cast<int32_t>(n) || (*id >= 0 && !state->has_id[*id])) *id = -1;
  }
  Tokenizer tok;
  tok.state_ = std::move(state);
  tok.ids_ = spec.ids;
  tok.add_bos_default_ = spec.add_bos_default;
  return tok;
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>* out) const {
  const TokenizerState& s = *state_;
  s.pre.for_each_piece(text, [&](std::string_view piece) { s.bpe.encode(piece, out); });
}

void Tokenizer::encode_into(std::string_view text, const EncodeOptions& options,
                            std::vector<int32_t>* out) const {
  assert(state_ && "encode on an empty Tokenizer");
  const TokenizerState& s = *state_;
  if (options.add_bos && ids_.bos >= 0) out->push_back(ids_.bos);
  std::string repaired;
  if (!utf8_is_valid(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  if (s.added.empty() || (!options.parse_special && !s.added.has_non_special())) {
    encode_text(text, out);
    return;
  }
  std::vector<AddedTokenMatcher::Segment> segments;
  s.added.split(text, options.parse_special, &segments);
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      out->push_back(seg.id);
    } else {
      encode_text(text.substr(seg.begin, seg.end - seg.begin), out);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  encode_into(text, options, &out);
  return out;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                                          const EncodeOptions& options,
                                                          int num_threads) const {
  std::vector<std::vector<int32_t>> result(texts.size());
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  num_threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(num_threads), texts.size()));
  if (num_threads <= 1) {
    for (size_t i = 0; i < texts.size(); ++i) result[i] = encode(texts[i], options);
    return result;
  }
  // Texts differ in length, so threads claim them one at a time rather than in fixed chunks.
  std::atomic<size_t> next{0};
  auto work = [&](int64_t, int64_t, int) {
    for (size_t i = next.fetch_add(1); i < texts.size(); i = next.fetch_add(1)) {
      result[i] = encode(texts[i], options);
    }
  };
  const TokenizerState& s = *state_;
  std::unique_lock<std::mutex> lock(s.pool_mu, std::try_to_lock);
  if (lock.owns_lock()) {
    if (!s.pool || s.pool->num_threads() != num_threads) {
      s.pool = std::make_unique<ThreadPool>(num_threads);
    }
    s.pool->parallel_for(num_threads, work);
  } else {
    ThreadPool pool(num_threads);
    pool.parallel_for(num_threads, work);
  }
  return result;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  const TokenizerState& s = *state_;
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= s.num_ids()) continue;
    if (options.skip_special && s.special[id]) continue;
    bytes += s.id_bytes(static_cast<size_t>(id));
  }
  if (utf8_is_valid(bytes)) return bytes;
  return utf8_lossy(bytes);
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  const TokenizerState& s = *state_;
  if (id < 0 || static_cast<size_t>(id) >= s.num_ids()) return {};
  return s.id_bytes(static_cast<size_t>(id));
}

bool Tokenizer::is_special(int32_t id) const {
  const TokenizerState& s = *state_;
  return id >= 0 && static_cast<size_t>(id) < s.special.size() && s.special[id];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const TokenizerState& s = *state_;
  auto it = s.by_text.find(std::string(token));
  if (it == s.by_text.end()) return std::nullopt;
  return it->second;
}

int32_t Tokenizer::vocab_size() const {
  return state_ ? static_cast<int32_t>(state_->num_ids()) : 0;
}

}  // namespace lancet
