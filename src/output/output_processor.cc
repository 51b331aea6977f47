// OutputProcessor: token events -> text deltas, stop strings (see output_processor.h).
#include "output/output_processor.h"

#include <algorithm>

namespace lancet {

OutputProcessor::OutputProcessor(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

Status OutputProcessor::check(const GenerationRequest& req) const {
  if (!req.params.stop.empty() && !tokenizer_)
    return InvalidArgument("stop strings need a tokenizer; this model has none");
  return OkStatus();
}

void OutputProcessor::add_request(int64_t request_id, const GenerationRequest& req) {
  if (!tokenizer_) return;  // no text to make: events pass through
  for (int32_t i = 0; i < req.params.n; ++i) {
    seqs_.try_emplace(SequenceKey{request_id, i},
                      SeqState{TextStream(*tokenizer_, req.params.stop, req.params.include_stop_str_in_output),
                               req.params.min_tokens});
  }
}

bool OutputProcessor::apply(SeqState& st, TokenEvent& ev, std::vector<SequenceKey>* ended) {
  if (st.ended) return false;  // cut by a stop string earlier in this step
  if (ev.token >= 0) {
    ++st.num_output;
    if (ev.finished && ev.finish_reason == FinishReason::kStop && !ev.stop_keeps_token) {
      ev.text = st.text.finish();  // an end token or stop token id adds no text
    } else {
      bool stopped = false;
      ev.text = st.text.push(ev.token, &stopped);
      if (stopped && st.num_output >= st.min_tokens) {
        // The engine ends the sequence here too, unless this token already ended it (length).
        if (!ev.finished) ended->push_back({ev.request_id, ev.index});
        ev.finished = true;
        ev.finish_reason = FinishReason::kStop;
      } else if (ev.finished) {
        ev.text += st.text.finish();  // length, or a completed document: everything still held
      }
    }
  }
  // Events without a token (abort, error) end the sequence without its held-back text.
  if (ev.finished) st.ended = true;
  return true;
}

void OutputProcessor::process(std::vector<TokenEvent>* events, std::vector<SequenceKey>* ended) {
  if (seqs_.empty()) return;
  size_t kept = 0;
  closed_.clear();
  for (TokenEvent& ev : *events) {
    const SequenceKey key{ev.request_id, ev.index};
    auto it = seqs_.find(key);
    // Untracked (no tokenizer): passed on as the engine made it.
    bool keep = true;
    if (it != seqs_.end()) {
      const bool was_ended = it->second.ended;
      keep = apply(it->second, ev, ended);
      if (!was_ended && it->second.ended) closed_.push_back(key);
    }
    if (!keep) continue;
    if (&(*events)[kept] != &ev) (*events)[kept] = std::move(ev);
    ++kept;
  }
  events->resize(kept);
  for (const SequenceKey& k : closed_) seqs_.erase(k);
}

}  // namespace lancet
