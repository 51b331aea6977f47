// The output side's place in the engine loop (vLLM's output processor). The engine works on
// token ids; an output stage (output/output_processor.h) turns its events into text and applies
// the stop strings. AsyncEngine calls it for each request it admits (on its loop thread) and
// with every step's events before they reach the request streams (on its output thread, beside
// the next step; never both at once). The sequences it ends (a stop string completed) are
// finished in the engine at the loop's next turn, within one step; a stage over a bare Engine
// finishes them before its next step.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace lancet {

class OutputStage {
 public:
  virtual ~OutputStage() = default;
  // Whether the stage can serve the request (stop strings need a tokenizer); checked before
  // the engine sees it, so a refusal is the submit's error.
  virtual Status check(const GenerationRequest& req) const = 0;
  // The engine accepted `req` as request_id (one sequence per choice).
  virtual void add_request(int64_t request_id, const GenerationRequest& req) = 0;
  // One step's events, in the engine's order. Sets each event's text. Where a stop string
  // completes, that event becomes the sequence's final one (finish_reason stop), the
  // sequence's later events are removed, and its key is appended to *ended when the engine has
  // not ended it in this step (the caller then calls Engine::finish_sequences). A final event
  // ends the stage's state of its sequence.
  virtual void process(std::vector<TokenEvent>* events, std::vector<SequenceKey>* ended) = 0;
};

}  // namespace lancet
