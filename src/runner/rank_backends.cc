// make_rank_backends: the default backend for one rank, one per device for a group.
#include "runner/rank_backends.h"

namespace lancet {

StatusOr<std::vector<std::unique_ptr<Backend>>> make_rank_backends(const RankBackendOptions& o) {
  if (o.size < 1) return InvalidArgument("ranks: size must be at least 1");
  std::vector<std::unique_ptr<Backend>> out;
  for (int r = 0; r < o.size; ++r) {
    StatusOr<std::unique_ptr<Backend>> be = InvalidArgument("ranks: no backend");
    if (o.size == 1 && o.isa == "auto") {
      be = make_backend(o.kind);
    } else if (o.kind == "cpu") {
      CpuBackendOptions bo;
      bo.isa = o.isa;
      bo.num_threads = o.num_threads;
      be = make_cpu_backend(bo);
    } else {
      be = make_backend_on_device(o.kind, r);
    }
    if (!be.ok()) return o.size > 1 ? be.status().with_context("tensor parallel rank " + std::to_string(r)) : be.status();
    RETURN_IF_ERROR((*be)->make_current());
    (*be)->set_activation_precision(o.precision);
    (*be)->set_fp8_attention_math(o.fp8_attention);
    out.push_back(std::move(*be));
  }
  RETURN_IF_ERROR(out[0]->make_current());
  return out;
}

std::vector<Backend*> rank_pointers(const std::vector<std::unique_ptr<Backend>>& backends) {
  std::vector<Backend*> p;
  for (const auto& b : backends) p.push_back(b.get());
  return p;
}

}  // namespace lancet
