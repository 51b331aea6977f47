// Backend factory: picks an implementation by name.
#include "backend/backend.h"

#ifdef LANCET_HAVE_CUDA
#include "backend/cuda/cuda_factory.h"
#endif

namespace lancet {

StatusOr<std::unique_ptr<Backend>> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
#ifdef LANCET_HAVE_CUDA
  if (name == "cuda") return make_cuda_backend();
  return Unimplemented("backend '" + name + "' is not available in this build (cpu, cuda)");
#else
  return Unimplemented("backend '" + name + "' is not available in this build (cpu)");
#endif
}

StatusOr<std::unique_ptr<Backend>> make_backend_on_device(const std::string& name, int device) {
  if (name == "cpu") {
    if (device != 0) return InvalidArgument("the cpu backend has one device (0), not " + std::to_string(device));
    return make_cpu_backend();
  }
#ifdef LANCET_HAVE_CUDA
  if (name == "cuda") {
    CudaBackendOptions o;
    o.device = device;
    return make_cuda_backend(o);
  }
#endif
  return make_backend(name);
}

}  // namespace lancet
