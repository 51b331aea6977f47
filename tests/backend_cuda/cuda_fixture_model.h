// A fixture model on the GPU for the engine-level CUDA tests: the backend, the source (which
// must outlive the model) and the model, destroyed in the reverse order.
#pragma once

#include <memory>
#include <string>

#include "cuda_test_util.h"
#include "io/model_source.h"
#include "model/llama_model.h"
#include "test_paths.h"

namespace lancet::testing {

struct GpuFixtureModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ModelSource> src;
  std::unique_ptr<LlamaModel> model;
};

inline StatusOr<GpuFixtureModel> gpu_fixture_model(const std::string& name) {
  GpuFixtureModel m;
  m.backend = gpu_backend();
  if (!m.backend) return FailedPrecondition("no CUDA backend");
  ASSIGN_OR_RETURN(m.src, open_model_source(fixture_dir(name)));
  ASSIGN_OR_RETURN(m.model, LlamaModel::create(*m.src, *m.backend));
  return m;
}

}  // namespace lancet::testing
