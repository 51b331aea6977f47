// Stop strings over streamed text (matches spanning chunks, held-back prefixes, never emitting
// stop text) and streaming detokenization of multi-byte characters split across tokens.
#include <gtest/gtest.h>

#include "tokenizer/stop_strings.h"
#include "tokenizer/stream_detokenizer.h"
#include "tokenizer_test_util.h"

namespace lancet {
namespace {

// Feeds chunks and returns (emitted text, stop index or -1).
std::pair<std::string, int> feed(StopStringMatcher& m, const std::vector<std::string>& chunks) {
  std::string out;
  for (const auto& c : chunks) {
    auto r = m.push(c);
    out += r.text;
    if (r.stopped) return {out, r.stop_index};
  }
  out += m.finish();
  return {out, -1};
}

TEST(StopStrings, MatchSpanningChunks) {
  StopStringMatcher m({"</answer>", "STOP"});
  auto r1 = m.push("The result is 42<");
  EXPECT_EQ(r1.text, "The result is 42");  // "<" may start "</answer>": held back
  EXPECT_FALSE(r1.stopped);
  auto r2 = m.push("/ans");
  EXPECT_EQ(r2.text, "");
  EXPECT_EQ(m.held_bytes(), 5u);
  auto r3 = m.push("wer> trailing");
  EXPECT_TRUE(r3.stopped);
  EXPECT_EQ(r3.stop_index, 0);
  EXPECT_EQ(r3.text, "");
  EXPECT_TRUE(m.push("more").text.empty());
  EXPECT_EQ(m.finish(), "");
}

TEST(StopStrings, FalseStartIsReleased) {
  StopStringMatcher m({"</answer>"});
  EXPECT_EQ(m.push("a </ans").text, "a ");
  EXPECT_EQ(m.push("i").text, "</ansi");
  EXPECT_EQ(m.finish(), "");
  StopStringMatcher m2({"abc"});
  EXPECT_EQ(m2.push("xab").text, "x");
  EXPECT_EQ(m2.finish(), "ab");  // end of stream without a match: everything comes out
}

TEST(StopStrings, EarliestMatchWinsAndOverlaps) {
  StopStringMatcher m({"world", "lo w"});
  auto [text, idx] = feed(m, {"hel", "lo", " wor", "ld"});
  EXPECT_EQ(text, "hel");
  EXPECT_EQ(idx, 1);
  // "aab" where the stop is "ab": the held "a" is released, the second "a" held, then matched.
  StopStringMatcher m2({"ab"});
  auto [t2, i2] = feed(m2, {"a", "a", "b"});
  EXPECT_EQ(t2, "a");
  EXPECT_EQ(i2, 0);
}

TEST(StopStrings, RandomChunkingNeverLeaksStopText) {
  std::mt19937 rng(9);
  const std::vector<std::string> stops = {"<|eot|>", "\n\nUser:", "停止", "aaa"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text = tok_test::random_text(rng, 1 + rng() % 20);
    if (rng() % 2) {
      size_t at = rng() % (text.size() + 1);
      while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
      text.insert(at, stops[rng() % stops.size()]);
    }
    ASSERT_TRUE(utf8_is_valid(text));
    // Reference: earliest occurrence over all stop strings.
    size_t first = std::string::npos;
    for (const auto& s : stops) first = std::min(first, text.find(s));
    // Cut into chunks at character boundaries (as a detokenizer would).
    std::vector<std::string> chunks;
    size_t i = 0;
    while (i < text.size()) {
      size_t n = 1 + rng() % 5, j = i;
      while (n-- && j < text.size()) {
        uint32_t cp;
        const int len = utf8_decode_one(text.data() + j, text.size() - j, &cp);
        j += len > 0 ? len : 1;
      }
      chunks.push_back(text.substr(i, j - i));
      i = j;
    }
    StopStringMatcher m(stops);
    auto [out, idx] = feed(m, chunks);
    if (first == std::string::npos) {
      ASSERT_EQ(out, text);
      ASSERT_EQ(idx, -1);
    } else {
      ASSERT_EQ(out, text.substr(0, first)) << nlohmann::json(text).dump();
      ASSERT_GE(idx, 0);
      ASSERT_EQ(text.compare(first, stops[idx].size(), stops[idx]), 0);
    }
    ASSERT_TRUE(utf8_is_valid(out));
  }
}

TEST(StreamDetokenizer, HoldsPartialCharacters) {
  const Tokenizer& tok = tok_test::llama3();
  ASSERT_TRUE(tok.loaded());
  // "🦙" is one 4-byte character that byte-level BPE splits over several tokens.
  const auto ids = tok.encode("🦙 llama");
  ASSERT_GE(ids.size(), 3u);
  StreamDetokenizer stream(tok);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(stream.push(id));
  pieces.push_back(stream.finish());
  std::string all;
  int first_nonempty = -1;
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_TRUE(utf8_is_valid(pieces[i]));
    if (first_nonempty < 0 && !pieces[i].empty()) first_nonempty = static_cast<int>(i);
    all += pieces[i];
  }
  EXPECT_EQ(all, "🦙 llama");
  EXPECT_GT(first_nonempty, 0);  // nothing came out until the emoji was complete
  EXPECT_EQ(pieces[first_nonempty].substr(0, 4), "🦙");

  // A stream cut inside the character: finish() gives U+FFFD, like decode.
  ASSERT_LT(tok.token_bytes(ids[0]).size(), 4u);
  StreamDetokenizer cut(tok);
  std::string text = cut.push(ids[0]);
  EXPECT_EQ(text, "");
  EXPECT_EQ(cut.pending_bytes(), tok.token_bytes(ids[0]).size());
  text += cut.finish();
  EXPECT_EQ(text, "\uFFFD");
  EXPECT_EQ(text, tok.decode(std::vector<int32_t>{ids[0]}));
}

}  // namespace
}  // namespace lancet
