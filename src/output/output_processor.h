// The output side of generation (vLLM's output processor): per sequence, incremental
// detokenization and stop strings over the engine's token events. It sets each event's text
// (never a partial UTF-8 character, never text that may start a stop string), cuts a sequence
// at its stop string (that token's event becomes the final one, finish_reason stop; the text
// ends before the stop string, or with it under include_stop_str_in_output; the events after
// it are dropped) and names the sequences the engine must end. End tokens and stop token ids
// add no text.
//
// AsyncEngine calls it on its loop thread as its OutputStage (runtime/ installs one); over a
// bare Engine:
//   auto events = engine.step();
//   out.process(&*events, &ended);
//   engine.finish_sequences(ended);
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "engine/output_stage.h"
#include "output/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace lancet {

class OutputProcessor : public OutputStage {
 public:
  // tokenizer: not owned; null for checkpoints without one (events pass through without
  // text, and requests with stop strings are refused).
  explicit OutputProcessor(const Tokenizer* tokenizer);

  Status check(const GenerationRequest& req) const override;
  void add_request(int64_t request_id, const GenerationRequest& req) override;
  void process(std::vector<TokenEvent>* events, std::vector<SequenceKey>* ended) override;

  // Sequences whose final event has not been seen yet.
  size_t num_open() const { return seqs_.size(); }

 private:
  struct SeqState {
    TextStream text;
    int32_t min_tokens = 0;  // a stop string before this many tokens does not end the sequence
    int32_t num_output = 0;  // tokens seen
    bool ended = false;      // final event seen in this batch: later ones are dropped
  };
  struct KeyHash {
    size_t operator()(const SequenceKey& k) const {
      return std::hash<int64_t>()(k.request_id * 31 + k.index);
    }
  };
  struct KeyEq {
    bool operator()(const SequenceKey& a, const SequenceKey& b) const {
      return a.request_id == b.request_id && a.index == b.index;
    }
  };
  // Applies one event to its sequence's state; false when the event is to be dropped.
  bool apply(SeqState& st, TokenEvent& ev, std::vector<SequenceKey>* ended);

  const Tokenizer* tokenizer_;
  std::unordered_map<SequenceKey, SeqState, KeyHash, KeyEq> seqs_;
  std::vector<SequenceKey> closed_;  // final events of the batch in process(): erased at its end
};

}  // namespace lancet
