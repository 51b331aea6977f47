// Split-KV decode attention: plans fixed-size partitions per (sequence, KV head), runs them on
// the worker pool (handed out one at a time: the last partition of a sequence is shorter),
// then merges each head's partitions with the online-softmax rule
//   M = max_i m_i,  L = sum_i l_i e^(m_i - M),  out = sum_i acc_i e^(m_i - M) / L,
// always in partition order, so the result does not depend on which worker ran what.
// An FP8 cache's scales are linear factors (stored = e4m3(x / scale)): k_scale joins the
// softmax scale given to the kernel and v_scale multiplies the merged output.
#include "backend/cpu/decode_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

namespace lancet::cpu {

DecodePartitionFn decode_partition_kernel(const std::string& isa) {
  if (isa == "avx512") return decode_partition_avx512();
  if (isa == "avx2") return decode_partition_avx2();
  return decode_partition_scalar();
}

namespace {

struct PartitionJob {
  int64_t seq;
  int64_t kv_head;
  int64_t key_begin, key_end;
};

// A (sequence, KV head) pair and where its partitions' jobs start.
struct HeadPlan {
  int64_t seq;
  int64_t kv_head;
  int64_t first_job;
  int64_t num_parts;
};

}  // namespace

Status decode_attention(const PagedAttentionArgs& a, const KvCacheLayer& c, WorkerPool& pool,
                        const std::string& isa, std::vector<float>* scratch) {
  const DecodePartitionFn kernel = decode_partition_kernel(isa);
  if (!kernel) return Internal("decode attention: no kernel for isa " + isa);
  const int64_t hd = c.head_dim, nkv = c.num_kv_heads;
  const int64_t G = a.num_heads / nkv;
  const bool fp8 = c.dtype == DType::kF8E4M3;
  const float qk_scale = fp8 ? a.scale * c.k_scale : a.scale;
  const float out_scale = fp8 ? c.v_scale : 1.f;
  // The caller's thread plans; workers only read the plan (kept between calls: no allocation
  // per layer once the largest batch has been seen). Named through references so that the
  // workers' lambdas see the caller's vectors, not their own thread_local ones.
  thread_local std::vector<PartitionJob> tl_jobs;
  thread_local std::vector<HeadPlan> tl_heads;
  std::vector<PartitionJob>& jobs = tl_jobs;
  std::vector<HeadPlan>& heads = tl_heads;
  jobs.clear();
  heads.clear();
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t q_len = a.query_start[s + 1] - a.query_start[s], ctx = a.context_lens[s];
    if (!decode_attention_handles(q_len, ctx, c)) continue;
    const int64_t parts = (ctx + kDecodePartitionKeys - 1) / kDecodePartitionKeys;
    for (int64_t h = 0; h < nkv; ++h) {
      heads.push_back({s, h, static_cast<int64_t>(jobs.size()), parts});
      for (int64_t p = 0; p < parts; ++p)
        jobs.push_back({s, h, p * kDecodePartitionKeys, std::min(ctx, (p + 1) * kDecodePartitionKeys)});
    }
  }
  if (jobs.empty()) return OkStatus();
  // Per job: max [G], sum [G], acc [G, hd].
  const int64_t per_job = G * (hd + 2);
  const int64_t num_jobs = static_cast<int64_t>(jobs.size());
  if (static_cast<int64_t>(scratch->size()) < num_jobs * per_job) scratch->resize(num_jobs * per_job);
  float* part = scratch->data();
  const int64_t q_row = a.num_heads * hd;

  std::atomic<int64_t> next{0};
  pool.parallel_for(std::min<int64_t>(num_jobs, pool.num_threads()), [&](int64_t, int64_t, int) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < num_jobs;) {
      const PartitionJob& j = jobs[i];
      float* base = part + i * per_job;
      DecodePartition p;
      p.q = a.q + a.query_start[j.seq] * q_row + j.kv_head * G * hd;
      p.block_table = a.block_tables + j.seq * a.max_blocks_per_seq;
      p.key_begin = j.key_begin;
      p.key_end = j.key_end;
      p.kv_head = j.kv_head;
      p.group = G;
      p.scale = qk_scale;
      p.max = base;
      p.sum = base + G;
      p.acc = base + 2 * G;
      kernel(p, c);
    }
  });

  const int64_t num_heads_planned = static_cast<int64_t>(heads.size());
  pool.parallel_for(num_heads_planned, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const HeadPlan& hp = heads[i];
      for (int64_t g = 0; g < G; ++g) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t p = 0; p < hp.num_parts; ++p) m = std::max(m, part[(hp.first_job + p) * per_job + g]);
        float* o = a.out + a.query_start[hp.seq] * q_row + (hp.kv_head * G + g) * hd;
        std::fill(o, o + hd, 0.f);
        float l = 0.f;
        for (int64_t p = 0; p < hp.num_parts; ++p) {
          const float* base = part + (hp.first_job + p) * per_job;
          const float w = std::exp(base[g] - m);  // e^(m_i - M); 0 for a partition with no finite score
          if (w == 0.f) continue;
          l += base[G + g] * w;
          const float* acc = base + 2 * G + g * hd;
          for (int64_t d = 0; d < hd; ++d) o[d] += acc[d] * w;
        }
        const float inv = out_scale / l;
        for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
      }
    }
  }, 4);
  return OkStatus();
}

}  // namespace lancet::cpu
