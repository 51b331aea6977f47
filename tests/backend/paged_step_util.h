// Shared by the paged attention tests (f32/bf16 and FP8 caches): shuffled block tables for a
// batch of sequences, and one engine-like step over them: each sequence's earlier tokens
// written by a kv_write of their own (earlier steps), then every sequence's new tokens in one
// kv_write and one paged_attention call.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"

namespace lancet::testing {

struct SeqSpec {
  int64_t cached;  // tokens already in the cache from earlier steps
  int64_t q_len;   // new tokens this step
};

struct PagedTables {
  std::vector<int32_t> tables;  // [num_seqs, max_blocks], -1 past a sequence's blocks
  int64_t max_blocks = 0;
  int64_t num_blocks = 0;       // the cache's blocks: those used plus `spare`
};

// Block ids shuffled so that the tables are not the identity.
inline PagedTables shuffled_tables(const std::vector<SeqSpec>& seqs, int64_t block_size, int64_t spare, uint32_t seed) {
  PagedTables t;
  int64_t used = 0;
  for (const SeqSpec& s : seqs) {
    const int64_t nb = (s.cached + s.q_len + block_size - 1) / block_size;
    t.max_blocks = std::max(t.max_blocks, nb);
    used += nb;
  }
  t.num_blocks = used + spare;
  std::vector<int32_t> ids(t.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  t.tables.assign(seqs.size() * t.max_blocks, -1);
  int64_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t nb = (seqs[s].cached + seqs[s].q_len + block_size - 1) / block_size;
    for (int64_t b = 0; b < nb; ++b) t.tables[s * t.max_blocks + b] = ids[next++];
  }
  return t;
}

// K, V: per sequence [cached + q_len, num_kv_heads * head_dim]; Q: per sequence
// [q_len, num_heads * head_dim]. Returns the attention output [sum of q_len, num_heads *
// head_dim] (each value -7 where the op wrote nothing); a failing call is a test failure.
inline std::vector<float> write_and_attend(Backend& be, const KvCacheLayer& cache, const PagedTables& t,
                                           const std::vector<SeqSpec>& seqs, const std::vector<std::vector<float>>& K,
                                           const std::vector<std::vector<float>>& V,
                                           const std::vector<std::vector<float>>& Q, int64_t num_heads) {
  const int64_t S = static_cast<int64_t>(seqs.size());
  const int64_t kv_row = cache.num_kv_heads * cache.head_dim, q_row = num_heads * cache.head_dim;
  const int64_t bs = cache.block_size;
  auto slot = [&](int64_t s, int64_t pos) {
    return static_cast<int64_t>(t.tables[s * t.max_blocks + pos / bs]) * bs + pos % bs;
  };
  for (int64_t s = 0; s < S; ++s) {
    if (seqs[s].cached == 0) continue;
    std::vector<int64_t> slots;
    for (int64_t p = 0; p < seqs[s].cached; ++p) slots.push_back(slot(s, p));
    KvWriteArgs w{seqs[s].cached, K[s].data(), V[s].data(), slots.data()};
    EXPECT_TRUE(be.kv_write(w, cache).ok());
  }
  std::vector<float> q, knew, vnew;
  std::vector<int64_t> slots;
  std::vector<int32_t> qstart{0}, ctx_lens;
  for (int64_t s = 0; s < S; ++s) {
    q.insert(q.end(), Q[s].begin(), Q[s].end());
    knew.insert(knew.end(), K[s].begin() + seqs[s].cached * kv_row, K[s].end());
    vnew.insert(vnew.end(), V[s].begin() + seqs[s].cached * kv_row, V[s].end());
    for (int64_t p = seqs[s].cached; p < seqs[s].cached + seqs[s].q_len; ++p) slots.push_back(slot(s, p));
    qstart.push_back(qstart.back() + static_cast<int32_t>(seqs[s].q_len));
    ctx_lens.push_back(static_cast<int32_t>(seqs[s].cached + seqs[s].q_len));
  }
  const int64_t T = qstart.back();
  KvWriteArgs w{T, knew.data(), vnew.data(), slots.data()};
  EXPECT_TRUE(be.kv_write(w, cache).ok());
  std::vector<float> out(T * q_row, -7.f);
  PagedAttentionArgs a;
  a.num_tokens = T;
  a.num_seqs = S;
  a.num_heads = num_heads;
  a.max_blocks_per_seq = t.max_blocks;
  a.scale = 1.0f / std::sqrt(static_cast<float>(cache.head_dim));
  a.q = q.data();
  a.query_start = qstart.data();
  a.context_lens = ctx_lens.data();
  a.block_tables = t.tables.data();
  a.out = out.data();
  const Status st = be.paged_attention(a, cache);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// The contiguous per-sequence reference in double: causal softmax attention of each new token
// over its sequence's keys. kval(s, i) / vval(s, i) give element i of sequence s's K / V (as
// the cache holds it: rounded to bf16, dequantized FP8, or exact). Returns [sum of q_len,
// num_heads * head_dim], in the same order as write_and_attend's output. p_round, when given,
// rounds each probability exp(s - max) before it weighs V (the sum stays over the unrounded
// probabilities, as the FP8 P V paths keep it).
template <typename KVal, typename VVal>
std::vector<double> reference_attention(const std::vector<SeqSpec>& seqs, const std::vector<std::vector<float>>& Q,
                                        int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, KVal kval,
                                        VVal vval, double (*p_round)(double) = nullptr) {
  const int64_t G = num_heads / num_kv_heads;
  const double scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<double> out;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t t = 0; t < seqs[s].q_len; ++t) {
      const int64_t pos = seqs[s].cached + t;
      for (int64_t h = 0; h < num_heads; ++h) {
        const int64_t kh = h / G;
        std::vector<double> sc(pos + 1);
        double m = -1e300;
        for (int64_t j = 0; j <= pos; ++j) {
          double d = 0;
          for (int64_t k = 0; k < head_dim; ++k)
            d += static_cast<double>(Q[s][(t * num_heads + h) * head_dim + k]) *
                 kval(s, (j * num_kv_heads + kh) * head_dim + k);
          sc[j] = d * scale;
          m = std::max(m, sc[j]);
        }
        double sum = 0;
        for (double& x : sc) {
          x = std::exp(x - m);
          sum += x;
          if (p_round) x = p_round(x);
        }
        for (int64_t k = 0; k < head_dim; ++k) {
          double o = 0;
          for (int64_t j = 0; j <= pos; ++j) o += sc[j] * vval(s, (j * num_kv_heads + kh) * head_dim + k);
          out.push_back(o / sum);
        }
      }
    }
  }
  return out;
}

}  // namespace lancet::testing
