// Backend factory: picks an implementation by name.
#include "backend/backend.h"

namespace lancet {

StatusOr<std::unique_ptr<Backend>> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  return Unimplemented("backend '" + name + "' is not available in this build (cpu)");
}

}  // namespace lancet
