// X^T X per linear input: rows buffered per input, multiplied out as one matmul per batch.
#include "eval/activation_moments.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace lancet {

namespace {
constexpr int kInputs = 4;
}  // namespace

ActivationMomentObserver::ActivationMomentObserver(Backend& backend, int64_t num_layers, int64_t batch_rows)
    : be_(backend), batch_rows_(std::max<int64_t>(1, batch_rows)),
      slots_(static_cast<size_t>(std::max<int64_t>(0, num_layers) * kInputs)) {}

ActivationMomentObserver::Slot* ActivationMomentObserver::slot(int64_t layer, LinearInput which) {
  const int64_t i = layer * kInputs + static_cast<int>(which);
  if (layer < 0 || i >= static_cast<int64_t>(slots_.size())) return nullptr;
  return &slots_[static_cast<size_t>(i)];
}

const ActivationMomentObserver::Slot* ActivationMomentObserver::slot(int64_t layer, LinearInput which) const {
  return const_cast<ActivationMomentObserver*>(this)->slot(layer, which);
}

Status ActivationMomentObserver::observe(int64_t layer, LinearInput which, const float* x, int64_t rows,
                                         int64_t cols) {
  Slot* s = slot(layer, which);
  if (!s || rows <= 0) return OkStatus();
  if (cols <= 0) return InvalidArgument("activation moments: empty input rows");
  if (s->cols == 0) {
    s->cols = cols;
    s->h.assign(static_cast<size_t>(cols * cols), 0.f);
  } else if (s->cols != cols) {
    return Internal("activation moments: layer " + std::to_string(layer) + " input width changed from " +
                    std::to_string(s->cols) + " to " + std::to_string(cols));
  }
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (!std::isfinite(x[i])) {
      non_finite_ = true;
      return OkStatus();
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (s->pending == 0) s->batch.resize(static_cast<size_t>(batch_rows_ * cols));
    std::copy(x + r * cols, x + (r + 1) * cols, s->batch.begin() + s->pending * cols);
    if (++s->pending == batch_rows_) RETURN_IF_ERROR(flush(*s));
  }
  return OkStatus();
}

Status ActivationMomentObserver::flush(Slot& s) {
  const int64_t n = s.pending, k = s.cols;
  if (n == 0) return OkStatus();
  // X^T [k, n] is both the matmul's input and its weight: y = X^T (X^T)^T = X^T X.
  std::vector<float> xt(static_cast<size_t>(k * n));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) xt[c * n + r] = s.batch[r * k + c];
  const TensorView view{DType::kF32, {k, n}, xt.data(), xt.size() * sizeof(float)};
  WeightSpec spec;
  spec.name = "activation moments";
  spec.tensor = &view;
  ASSIGN_OR_RETURN(WeightMatrix w, be_.upload_weight(spec));
  ASSIGN_OR_RETURN(Buffer dx, be_.alloc(xt.size() * sizeof(float)));
  ASSIGN_OR_RETURN(Buffer dy, be_.alloc(static_cast<size_t>(k * k) * sizeof(float)));
  RETURN_IF_ERROR(be_.copy_to_device(dx.data(), xt.data(), xt.size() * sizeof(float)));
  RETURN_IF_ERROR(be_.matmul(dx.as<float>(), k, w, dy.as<float>()));
  std::vector<float> y(static_cast<size_t>(k * k));
  RETURN_IF_ERROR(be_.synchronize());
  RETURN_IF_ERROR(be_.copy_to_host(y.data(), dy.data(), y.size() * sizeof(float)));
  for (size_t i = 0; i < y.size(); ++i) s.h[i] += y[i];
  s.rows += n;
  s.pending = 0;
  s.batch.clear();
  s.batch.shrink_to_fit();
  return OkStatus();
}

Status ActivationMomentObserver::finish() {
  for (Slot& s : slots_) RETURN_IF_ERROR(flush(s));
  return OkStatus();
}

const std::vector<float>* ActivationMomentObserver::moments(int64_t layer, LinearInput which) const {
  const Slot* s = slot(layer, which);
  return s && s->cols > 0 && !s->h.empty() ? &s->h : nullptr;
}

int64_t ActivationMomentObserver::cols(int64_t layer, LinearInput which) const {
  const Slot* s = slot(layer, which);
  return s ? s->cols : 0;
}

int64_t ActivationMomentObserver::rows_seen(int64_t layer, LinearInput which) const {
  const Slot* s = slot(layer, which);
  return s ? s->rows + s->pending : 0;
}

void ActivationMomentObserver::release(int64_t layer, LinearInput which) {
  if (Slot* s = slot(layer, which)) {
    s->h.clear();
    s->h.shrink_to_fit();
  }
}

}  // namespace lancet
