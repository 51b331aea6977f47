// NcclCommunicator: the tensor-parallel all-reduce over NCCL, with libnccl loaded by dlopen.
// One thread drives every GPU of the group, so the communicators come from ncclCommInitAll and
// each collective is one NCCL group of per-device calls, enqueued on the ranks' streams (no
// host synchronisation). NVLink SHARP (multicast) is left off unless NCCL_NVLS_ENABLE is set.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_factory.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define LANCET_HAVE_NCCL_HEADER 1
#endif

namespace lancet {

#ifdef LANCET_HAVE_NCCL_HEADER
namespace {

struct NcclApi {
  void* handle = nullptr;
  ncclResult_t (*get_version)(int*) = nullptr;
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;
  int version = 0;
  Status status = OkStatus();
};

template <typename F>
bool load_symbol(void* h, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  return *out != nullptr;
}

// Loaded once per process; the library stays loaded.
const NcclApi& nccl_api() {
  static NcclApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names;
    if (const char* env = std::getenv("LANCET_NCCL_LIBRARY")) names.emplace_back(env);
    names.emplace_back("libnccl.so.2");
    names.emplace_back("libnccl.so");
    std::string errors;
    for (const std::string& n : names) {
      api.handle = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (api.handle) break;
      const char* e = dlerror();
      errors += "\n  " + n + ": " + (e ? e : "not found");
    }
    if (!api.handle) {
      api.status = FailedPrecondition("tensor parallel: cannot load NCCL (set LANCET_NCCL_LIBRARY or add "
                                      "libnccl.so.2 to LD_LIBRARY_PATH):" + errors);
      return;
    }
    bool ok = load_symbol(api.handle, "ncclGetVersion", &api.get_version) &&
              load_symbol(api.handle, "ncclCommInitAll", &api.comm_init_all) &&
              load_symbol(api.handle, "ncclCommDestroy", &api.comm_destroy) &&
              load_symbol(api.handle, "ncclAllReduce", &api.all_reduce) &&
              load_symbol(api.handle, "ncclGroupStart", &api.group_start) &&
              load_symbol(api.handle, "ncclGroupEnd", &api.group_end) &&
              load_symbol(api.handle, "ncclGetErrorString", &api.error_string);
    if (!ok) {
      api.status = FailedPrecondition("tensor parallel: the NCCL library lacks a symbol this build uses");
      return;
    }
    api.get_version(&api.version);
    if (api.version / 10000 != NCCL_MAJOR && api.version / 1000 != NCCL_MAJOR)
      api.status = FailedPrecondition("tensor parallel: NCCL " + std::to_string(api.version) +
                                      " loaded; this build expects major version " + std::to_string(NCCL_MAJOR));
  });
  return api;
}

Status nccl_status(const NcclApi& api, ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return OkStatus();
  return Internal(std::string("NCCL ") + what + ": " + api.error_string(r));
}

class NcclCommunicator final : public TpCommunicator {
 public:
  NcclCommunicator(const NcclApi& api, std::vector<ncclComm_t> comms, std::vector<cudaStream_t> streams)
      : api_(api), comms_(std::move(comms)), streams_(std::move(streams)) {}
  ~NcclCommunicator() override {
    for (ncclComm_t c : comms_) api_.comm_destroy(c);
  }
  int size() const override { return static_cast<int>(comms_.size()); }

  Status all_reduce_sum(std::span<Backend* const> ranks, std::span<float* const> per_rank, int64_t n) override {
    if (ranks.size() != comms_.size() || per_rank.size() != comms_.size())
      return InvalidArgument("all_reduce_sum: " + std::to_string(per_rank.size()) + " buffers for " +
                             std::to_string(comms_.size()) + " ranks");
    if (n <= 0) return OkStatus();
    RETURN_IF_ERROR(nccl_status(api_, api_.group_start(), "group start"));
    Status st = OkStatus();
    for (size_t r = 0; r < comms_.size() && st.ok(); ++r)
      st = nccl_status(api_,
                       api_.all_reduce(per_rank[r], per_rank[r], static_cast<size_t>(n), ncclFloat32, ncclSum,
                                       comms_[r], streams_[r]),
                       "all-reduce");
    // The group must be closed even after an error, or NCCL stays in group mode.
    Status end = nccl_status(api_, api_.group_end(), "group end");
    return st.ok() ? end : st;
  }

 private:
  const NcclApi& api_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
};

}  // namespace

StatusOr<std::unique_ptr<TpCommunicator>> make_nccl_communicator(std::span<Backend* const> ranks) {
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  for (Backend* be : ranks) {
    auto* cb = dynamic_cast<cuda::CudaBackend*>(be);
    if (!cb) return InvalidArgument("tensor parallel: NCCL needs CUDA backends");
    for (int d : devices)
      if (d == cb->device_index())
        return InvalidArgument("tensor parallel: two ranks on GPU " + std::to_string(d));
    devices.push_back(cb->device_index());
    streams.push_back(cb->stream());
  }
  // Multicast (NVLS) stays off unless asked for: on shared hosts it can take GPUs out of service.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  const NcclApi& api = nccl_api();
  RETURN_IF_ERROR(api.status);
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  RETURN_IF_ERROR(nccl_status(api, api.comm_init_all(comms.data(), static_cast<int>(devices.size()), devices.data()),
                              "ncclCommInitAll"));
  return std::unique_ptr<TpCommunicator>(new NcclCommunicator(api, std::move(comms), std::move(streams)));
}

#else  // no nccl.h in this CUDA toolkit

StatusOr<std::unique_ptr<TpCommunicator>> make_nccl_communicator(std::span<Backend* const> ranks) {
  (void)ranks;
  return Unimplemented("tensor parallel: this build has no NCCL headers (nccl.h)");
}

#endif

}  // namespace lancet
