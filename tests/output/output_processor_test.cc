// The output side over token events: text deltas that concatenate to the tokenizer's decode
// (never a partial character), stop strings cutting a sequence at the right token (inside a
// step's run of tokens too, with and without include_stop_str_in_output, not before
// min_tokens), end tokens adding no text, choices kept apart, and no state left behind. Then
// through AsyncEngine over a fake model: a stop string ends the sequence, whose blocks are free
// by the time its stream ends.
#include "output/output_processor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>

#include "engine/async_engine.h"
#include "engine/successor_logits.h"
#include "test_paths.h"
#include "tokenizer/utf8.h"

namespace lancet {
namespace {

const Tokenizer& llama3() {
  static const Tokenizer tok = [] {
    auto t = Tokenizer::from_json_file(testing::shared_dir() + "/models/llama3-tokenizer/tokenizer.json");
    if (!t.ok()) {
      ADD_FAILURE() << t.status().to_string();
      return Tokenizer();
    }
    return std::move(t).value();
  }();
  return tok;
}

// The events the engine makes for `ids` of one sequence, the last one final with `reason`.
std::vector<TokenEvent> token_events(int64_t rid, int32_t index, const std::vector<int32_t>& ids,
                                     FinishReason reason = FinishReason::kLength) {
  std::vector<TokenEvent> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    TokenEvent ev;
    ev.request_id = rid;
    ev.index = index;
    ev.token = ids[i];
    ev.finished = i + 1 == ids.size() && reason != FinishReason::kNone;
    ev.finish_reason = ev.finished ? reason : FinishReason::kNone;
    out.push_back(ev);
  }
  return out;
}

GenerationRequest request(std::vector<std::string> stop = {}, bool include_stop = false) {
  GenerationRequest q;
  q.prompt = {1};
  q.params.stop = std::move(stop);
  q.params.include_stop_str_in_output = include_stop;
  return q;
}

std::string joined(const std::vector<TokenEvent>& events) {
  std::string s;
  for (const TokenEvent& ev : events) s += ev.text;
  return s;
}

TEST(OutputProcessor, TextDeltasConcatenateToTheDecodedText) {
  const Tokenizer& tok = llama3();
  ASSERT_TRUE(tok.loaded());
  const std::string text = "Llamas 🦙 live in the Andes; 山 and 川.";
  const std::vector<int32_t> ids = tok.encode(text);
  OutputProcessor out(&tok);
  out.add_request(7, request());
  // One token per step, as without speculation.
  std::string all;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<TokenEvent> events = token_events(7, 0, {ids[i]}, i + 1 == ids.size() ? FinishReason::kLength
                                                                                     : FinishReason::kNone);
    std::vector<SequenceKey> ended;
    out.process(&events, &ended);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_TRUE(utf8_is_valid(events[0].text)) << i;
    EXPECT_TRUE(ended.empty());
    all += events[0].text;
  }
  EXPECT_EQ(all, text);
  EXPECT_EQ(all, tok.decode(ids));
  EXPECT_EQ(out.num_open(), 0u);
}

TEST(OutputProcessor, StopStringEndsTheSequenceAtItsTokenAndDropsTheRest) {
  const Tokenizer& tok = llama3();
  ASSERT_TRUE(tok.loaded());
  const std::vector<int32_t> ids = tok.encode("The answer is 42. Then more text follows.");
  for (bool include : {false, true}) {
    OutputProcessor out(&tok);
    out.add_request(3, request({"42."}, include));
    // A speculative step: every token in one batch, the stop string in the middle.
    std::vector<TokenEvent> events = token_events(3, 0, ids, FinishReason::kLength);
    std::vector<SequenceKey> ended;
    out.process(&events, &ended);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(joined(events), include ? "The answer is 42." : "The answer is ");
    EXPECT_TRUE(events.back().finished);
    EXPECT_EQ(events.back().finish_reason, FinishReason::kStop);
    for (size_t i = 0; i + 1 < events.size(); ++i) EXPECT_FALSE(events[i].finished);
    // The final event is the token that completed the stop string; nothing after it.
    const std::string upto = tok.decode(std::vector<int32_t>(ids.begin(), ids.begin() + events.size()));
    EXPECT_NE(upto.find("42."), std::string::npos) << upto;
    EXPECT_EQ(tok.decode(std::vector<int32_t>(ids.begin(), ids.begin() + events.size() - 1)).find("42."),
              std::string::npos);
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0].request_id, 3);
    EXPECT_EQ(ended[0].index, 0);
    EXPECT_EQ(out.num_open(), 0u);
  }
}

TEST(OutputProcessor, StopStringOnTheLastTokenTurnsLengthIntoStop) {
  const Tokenizer& tok = llama3();
  const std::vector<int32_t> ids = tok.encode("one two three");
  OutputProcessor out(&tok);
  out.add_request(1, request({"three"}));
  std::vector<TokenEvent> events = token_events(1, 0, ids, FinishReason::kLength);
  std::vector<SequenceKey> ended;
  out.process(&events, &ended);
  EXPECT_EQ(joined(events), "one two ");
  EXPECT_EQ(events.back().finish_reason, FinishReason::kStop);
  EXPECT_TRUE(ended.empty()) << "the engine has ended it already";
}

TEST(OutputProcessor, EndTokenAddsNoTextAndReleasesWhatWasHeld) {
  const Tokenizer& tok = llama3();
  std::vector<int32_t> ids = tok.encode("wait for it x");
  const int32_t eot = tok.special_ids().eot >= 0 ? tok.special_ids().eot : tok.special_ids().eos;
  ASSERT_GE(eot, 0);
  ids.push_back(eot);
  OutputProcessor out(&tok);
  out.add_request(1, request({"xyz"}));  // the "x" of " x" may start the stop string: held back
  std::vector<TokenEvent> events = token_events(1, 0, std::vector<int32_t>(ids.begin(), ids.end() - 1),
                                                FinishReason::kNone);
  std::vector<SequenceKey> ended;
  out.process(&events, &ended);
  EXPECT_EQ(joined(events), "wait for it ");
  std::vector<TokenEvent> last = token_events(1, 0, {eot}, FinishReason::kStop);
  out.process(&last, &ended);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].text, "x");
  EXPECT_TRUE(ended.empty());
}

// A completed structured-output document stops at a token that is part of the text.
TEST(OutputProcessor, StopThatKeepsItsTokenAddsItsText) {
  const Tokenizer& tok = llama3();
  const std::vector<int32_t> ids = tok.encode("{\"a\": 1}");
  OutputProcessor out(&tok);
  out.add_request(1, request());
  std::vector<TokenEvent> events = token_events(1, 0, ids, FinishReason::kStop);
  events.back().stop_keeps_token = true;
  std::vector<SequenceKey> ended;
  out.process(&events, &ended);
  EXPECT_EQ(joined(events), "{\"a\": 1}");
  EXPECT_TRUE(events.back().finished);
  EXPECT_TRUE(ended.empty());
}

TEST(OutputProcessor, StopStringBeforeMinTokensDoesNotEndTheSequence) {
  const Tokenizer& tok = llama3();
  const std::vector<int32_t> ids = tok.encode("stop here and go on");
  GenerationRequest q = request({"here"});
  q.params.min_tokens = static_cast<int32_t>(ids.size());
  OutputProcessor out(&tok);
  out.add_request(1, q);
  std::vector<TokenEvent> events = token_events(1, 0, ids, FinishReason::kNone);
  std::vector<SequenceKey> ended;
  out.process(&events, &ended);
  EXPECT_EQ(events.size(), ids.size());
  for (const TokenEvent& ev : events) EXPECT_FALSE(ev.finished);
  EXPECT_TRUE(ended.empty());
  EXPECT_EQ(out.num_open(), 1u);
}

TEST(OutputProcessor, ChoicesAndRequestsAreKeptApart) {
  const Tokenizer& tok = llama3();
  const std::vector<int32_t> a = tok.encode("alpha beta gamma");
  const std::vector<int32_t> b = tok.encode("beta delta");
  GenerationRequest q = request({"beta"});
  q.params.n = 2;
  OutputProcessor out(&tok);
  out.add_request(5, q);
  out.add_request(6, request());
  std::vector<TokenEvent> events;
  // Interleaved as the engine makes them: one event per sequence per step.
  const std::vector<TokenEvent> e0 = token_events(5, 0, a), e1 = token_events(5, 1, b), e2 = token_events(6, 0, b);
  for (size_t i = 0; i < 16; ++i)
    for (const auto* e : {&e0, &e1, &e2})
      if (i < e->size()) events.push_back((*e)[i]);
  std::vector<SequenceKey> ended;
  out.process(&events, &ended);
  std::map<std::pair<int64_t, int32_t>, std::string> text;
  std::map<std::pair<int64_t, int32_t>, FinishReason> reason;
  for (const TokenEvent& ev : events) {
    text[{ev.request_id, ev.index}] += ev.text;
    if (ev.finished) reason[{ev.request_id, ev.index}] = ev.finish_reason;
  }
  EXPECT_EQ((text[{5, 0}]), "alpha ");
  EXPECT_EQ((reason[{5, 0}]), FinishReason::kStop);
  EXPECT_EQ((text[{5, 1}]), "");
  EXPECT_EQ((reason[{5, 1}]), FinishReason::kStop);
  EXPECT_EQ((text[{6, 0}]), "beta delta");
  EXPECT_EQ((reason[{6, 0}]), FinishReason::kLength);
  EXPECT_EQ(ended.size(), 2u);  // both choices of request 5 ended before their last token
  EXPECT_EQ(out.num_open(), 0u);
}

TEST(OutputProcessor, AbortEndsTheStateWithoutText) {
  const Tokenizer& tok = llama3();
  OutputProcessor out(&tok);
  out.add_request(9, request({"never"}));
  std::vector<TokenEvent> events = token_events(9, 0, tok.encode("held n"), FinishReason::kNone);
  TokenEvent abort;
  abort.request_id = 9;
  abort.finished = true;
  abort.finish_reason = FinishReason::kAbort;
  events.push_back(abort);
  std::vector<SequenceKey> ended;
  out.process(&events, &ended);
  EXPECT_EQ(joined(events), "held ");  // the held "n" (of "never") is not released
  EXPECT_EQ(events.back().finish_reason, FinishReason::kAbort);
  EXPECT_EQ(out.num_open(), 0u);
}

TEST(OutputProcessor, WithoutATokenizerEventsPassThroughAndStopStringsAreRefused) {
  OutputProcessor out(nullptr);
  EXPECT_NE(out.check(request({"x"})).message().find("need a tokenizer"), std::string::npos);
  EXPECT_TRUE(out.check(request()).ok());
  out.add_request(1, request());
  std::vector<TokenEvent> events = token_events(1, 0, {5, 6, 7});
  std::vector<SequenceKey> ended;
  out.process(&events, &ended);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(joined(events), "");
  EXPECT_EQ(events[2].finish_reason, FinishReason::kLength);
}

// Next token = last + 1 (mod 100); the Llama 3 tokenizer reads ids below 100 as ASCII text.
class SuccessorModel : public ModelExecutor {
 public:
  int64_t vocab_size() const override { return 100; }
  int32_t block_size() const override { return 4; }
  int64_t num_blocks() const override { return 64; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    ++passes;
    testing::successor_logits(batch, 100, logits);
    return OkStatus();
  }
  std::atomic<int64_t> passes{0};
};

TEST(OutputProcessor, ThroughAsyncEngineAStopStringFreesTheBlocksBeforeTheStreamEnds) {
  const Tokenizer& tok = llama3();
  SuccessorModel model;
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 4, .max_model_len = 256};
  Engine engine(cfg, &model);
  OutputProcessor out(&tok);
  AsyncEngine async(&engine, &out);
  std::vector<int32_t> continuation;
  for (int32_t t = 11; t < 51; ++t) continuation.push_back(t);
  const std::string full = tok.decode(continuation);
  // Stop on the text of tokens 30..31: the 21st generated token completes it.
  const std::string stop = tok.decode(std::vector<int32_t>{30, 31});
  ASSERT_EQ(full.find(stop), tok.decode(std::vector<int32_t>(continuation.begin(), continuation.begin() + 19)).size());
  GenerationRequest q;
  q.prompt = {8, 9, 10};
  q.params.temperature = 0;
  q.params.max_tokens = 40;
  q.params.stop = {stop};
  auto s = async.submit(q);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  std::string text;
  int tokens = 0;
  TokenEvent ev;
  FinishReason reason = FinishReason::kNone;
  while ((*s)->next(&ev)) {
    text += ev.text;
    if (ev.token >= 0) ++tokens;
    if (ev.finished) reason = ev.finish_reason;
  }
  EXPECT_EQ(text, full.substr(0, full.find(stop)));
  EXPECT_EQ(reason, FinishReason::kStop);
  EXPECT_EQ(tokens, 21);
  // Published before the final event: the blocks are back. The output thread sees the stop
  // string beside the loop, which may have run a few more steps for the sequence by then (at
  // most the batches queued for the output thread, and one); their tokens never reach the stream.
  const EngineStats st = async.stats();
  EXPECT_EQ(st.num_free_blocks, st.num_blocks);
  EXPECT_EQ(st.num_running, 0);
  const int64_t max_steps = 21 + static_cast<int64_t>(AsyncEngine::kMaxQueuedBatches) + 1;
  EXPECT_GE(st.generation_tokens, 21);
  EXPECT_LE(st.generation_tokens, max_steps);
  EXPECT_EQ(model.passes.load(), st.generation_tokens);
  EXPECT_EQ(out.num_open(), 0u);

  // Without an output stage nobody could apply a stop string.
  SuccessorModel other;
  Engine plain(cfg, &other);
  AsyncEngine bare(&plain);
  auto refused = bare.submit(q);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("need a tokenizer"), std::string::npos);
}

}  // namespace
}  // namespace lancet
