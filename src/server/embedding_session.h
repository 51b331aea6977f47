// One /v1/embeddings request between the HTTP handler and the AsyncEngine: encodes the inputs
// (text or token ids), checks each against the context length, submits one pooling request
// per input (the engine computes the prompt and returns its last-token hidden state after
// the final norm, L2-normalized) and builds the response. Waiting ends at the deadline
// (--timeout) or when the client is gone; either cancels what still runs, as does the
// destructor.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "server/openai_embeddings.h"
#include "server/serving_model.h"

namespace lancet::server {

class EmbeddingSession {
 public:
  using Clock = std::chrono::steady_clock;
  using ClientGone = std::function<bool()>;

  EmbeddingSession(ServingModel* model, EmbeddingRequest request, double timeout_s);
  ~EmbeddingSession();
  EmbeddingSession(const EmbeddingSession&) = delete;
  EmbeddingSession& operator=(const EmbeddingSession&) = delete;

  void set_client_gone(ClientGone check) { client_gone_ = std::move(check); }
  // Encodes, checks and submits (400 bad input or too long, 429/503 from the engine), then
  // waits for every embedding (408 past the deadline, 499 client gone, 500 model failure).
  std::optional<ApiError> run(Json* response);

 private:
  std::optional<ApiError> encode(std::vector<std::vector<int32_t>>* inputs) const;
  std::optional<ApiError> submit(std::vector<std::vector<int32_t>> inputs);
  std::optional<ApiError> wait(size_t i, std::vector<float>* embedding);
  void cancel_all();

  ServingModel* model_;
  EmbeddingRequest req_;
  double timeout_s_;
  Clock::time_point deadline_;
  ClientGone client_gone_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  int64_t prompt_tokens_ = 0;
};

}  // namespace lancet::server
