// BPE merge loop and per-thread piece cache; see bpe_model.h.
#include "tokenizer/bpe_model.h"

#include <atomic>
#include <climits>
#include <algorithm>
#include <unordered_map>

namespace lancet {
namespace {

// Pieces up to this many symbols use the quadratic scan (contiguous, branch-light, faster for
// short words); longer ones (long CJK runs, repeated characters) use a heap so cost stays
// O(n log n).
constexpr size_t kLinearMaxSymbols = 96;
// Only short pieces are cached: long ones rarely repeat and would crowd the cache.
constexpr size_t kCacheMaxPieceBytes = 128;
constexpr size_t kCacheMaxEntries = 1 << 16;

std::atomic<uint64_t> g_next_instance{1};

struct TransparentHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return hash_bytes(s.data(), s.size()); }
};

// Per-thread memo of piece -> ids. Ids live in one arena; the map stores (offset, length).
struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, TransparentHash, std::equal_to<>>
      map;
  std::vector<int32_t> arena;
  void reset(uint64_t new_owner) {
    owner = new_owner;
    map.clear();
    arena.clear();
  }
};

PieceCache& thread_cache() {
  thread_local PieceCache cache;
  return cache;
}

}  // namespace

StatusOr<BpeModel> BpeModel::build(const BpeModelConfig& config) {
  BpeModel m;
  m.instance_id_ = g_next_instance.fetch_add(1);
  m.ignore_merges_ = config.ignore_merges;
  m.vocab_.reserve(config.vocab.size());
  for (const auto& [bytes, id] : config.vocab) {
    if (id < 0) return InvalidArgument(config.source + ": negative token id for vocab entry");
    if (bytes.empty()) return InvalidArgument(config.source + ": empty vocab entry (id " +
                                              std::to_string(id) + ")");
    m.vocab_.insert(bytes, id);
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    m.byte_ids_[b] = m.vocab_.find(std::string_view(&c, 1));
  }
  m.merges_.reserve(config.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < config.merges.size(); ++rank) {
    const auto& [a, b] = config.merges[rank];
    const int32_t ia = m.vocab_.find(a), ib = m.vocab_.find(b);
    joined.assign(a).append(b);
    const int32_t ij = m.vocab_.find(joined);
    if (ia < 0 || ib < 0 || ij < 0) {
      ++m.skipped_merges_;
      continue;
    }
    m.merges_.insert(ia, ib, {static_cast<int32_t>(rank), ij});
  }
  return m;
}

void BpeModel::merge_linear(std::vector<int32_t>* ids_ptr) const {
  std::vector<int32_t>& ids = *ids_ptr;
  struct Pair {
    int32_t rank, id;
  };
  Pair pairs[kLinearMaxSymbols];
  auto lookup = [&](int32_t a, int32_t b) -> Pair {
    const PairMergeMap::Value* v = merges_.find(a, b);
    return v ? Pair{v->rank, v->id} : Pair{INT32_MAX, -1};
  };
  size_t n = ids.size();
  for (size_t i = 0; i + 1 < n; ++i) pairs[i] = lookup(ids[i], ids[i + 1]);
  while (n > 1) {
    size_t best = 0;
    int32_t best_rank = pairs[0].rank;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (pairs[i].rank < best_rank) {
        best_rank = pairs[i].rank;
        best = i;
      }
    }
    if (best_rank == INT32_MAX) break;
    ids[best] = pairs[best].id;
    for (size_t i = best + 1; i + 1 < n; ++i) ids[i] = ids[i + 1];
    for (size_t i = best; i + 2 < n; ++i) pairs[i] = pairs[i + 1];
    --n;
    if (best > 0) pairs[best - 1] = lookup(ids[best - 1], ids[best]);
    if (best + 1 < n) pairs[best] = lookup(ids[best], ids[best + 1]);
  }
  ids.resize(n);
}

void BpeModel::merge_heap(std::vector<int32_t>* ids_ptr) const {
  std::vector<int32_t>& ids = *ids_ptr;
  const int32_t n = static_cast<int32_t>(ids.size());
  struct Cand {
    int32_t rank, pos, right, left_id, right_id, new_id;
  };
  // Min-heap on (rank, pos): lowest rank first, leftmost among equal ranks.
  auto later = [](const Cand& a, const Cand& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  // Reused across calls: long pieces are common in CJK text and allocation would dominate.
  thread_local std::vector<int32_t> prev, next;
  thread_local std::vector<Cand> heap;
  prev.resize(n);
  next.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  auto push = [&](int32_t pos, int32_t right) {
    if (pos < 0 || right < 0) return;
    if (const PairMergeMap::Value* v = merges_.find(ids[pos], ids[right])) {
      heap.push_back({v->rank, pos, right, ids[pos], ids[right], v->id});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const PairMergeMap::Value* v = merges_.find(ids[i], ids[i + 1])) {
      heap.push_back({v->rank, i, i + 1, ids[i], ids[i + 1], v->id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cand c = heap.back();
    heap.pop_back();
    // Stale when either side was merged away or changed since the candidate was pushed.
    if (ids[c.pos] != c.left_id || next[c.pos] != c.right || ids[c.right] != c.right_id) continue;
    ids[c.pos] = c.new_id;
    ids[c.right] = -1;
    const int32_t nn = next[c.right];
    next[c.pos] = nn;
    if (nn >= 0) prev[nn] = c.pos;
    next[c.right] = -2;
    push(prev[c.pos], c.pos);
    push(c.pos, nn);
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) ids[w++] = ids[i];
  ids.resize(w);
}

void BpeModel::encode_uncached(std::string_view piece, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    const int32_t whole = vocab_.find(piece);
    if (whole >= 0) {
      out->push_back(whole);
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  ids.clear();
  for (unsigned char c : piece) {
    // A byte without a token is dropped, as the reference does when there is no unk token.
    if (byte_ids_[c] >= 0) ids.push_back(byte_ids_[c]);
  }
  if (ids.size() > 1) {
    if (ids.size() <= kLinearMaxSymbols) {
      merge_linear(&ids);
    } else {
      merge_heap(&ids);
    }
  }
  out->insert(out->end(), ids.begin(), ids.end());
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.size() == 1) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(piece[0])];
    if (id >= 0) out->push_back(id);
    return;
  }
  if (ignore_merges_) {
    const int32_t whole = vocab_.find(piece);
    if (whole >= 0) {
      out->push_back(whole);
      return;
    }
  }
  if (piece.size() > kCacheMaxPieceBytes) {
    encode_uncached(piece, out);
    return;
  }
  PieceCache& cache = thread_cache();
  if (cache.owner != instance_id_) cache.reset(instance_id_);
  if (auto it = cache.map.find(piece); it != cache.map.end()) {
    const auto [off, len] = it->second;
    out->insert(out->end(), cache.arena.begin() + off, cache.arena.begin() + off + len);
    return;
  }
  const size_t before = out->size();
  encode_uncached(piece, out);
  if (cache.map.size() >= kCacheMaxEntries) cache.reset(instance_id_);
  const uint32_t off = static_cast<uint32_t>(cache.arena.size());
  cache.arena.insert(cache.arena.end(), out->begin() + before, out->end());
  cache.map.emplace(std::string(piece), std::make_pair(off, static_cast<uint32_t>(out->size() - before)));
}

}  // namespace lancet
