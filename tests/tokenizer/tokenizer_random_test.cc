// Randomized checks of the Llama 3 tokenizer: ids equal HF `tokenizers` on a seeded random
// corpus (this is what pins the PCRE2 regex translation and the merge order), decode(encode(x))
// == x, streaming equals full decode, batch equals single, concurrent encodes agree, and lossy
// UTF-8 decoding equals Python's errors='replace'.
#include <thread>

#include <gtest/gtest.h>

#include "tokenizer/stream_detokenizer.h"
#include "tokenizer_test_util.h"

namespace lancet {
namespace {

using tok_test::llama3;
using tok_test::random_text;

std::vector<std::string> random_corpus(uint32_t seed, int count, int max_pieces) {
  std::mt19937 rng(seed);
  std::vector<std::string> texts;
  for (int i = 0; i < count; ++i) {
    texts.push_back(random_text(rng, 1 + static_cast<int>(rng() % max_pieces)));
  }
  return texts;
}

TEST(TokenizerRandom, MatchesHfTokenizersOnRandomCorpus) {
  const Tokenizer& tok = llama3();
  ASSERT_TRUE(tok.loaded());
  auto texts = random_corpus(7, 1500, 60);
  // Long runs stress the heap merge path and long whitespace/letter runs.
  texts.push_back(std::string(3000, 'x'));
  texts.push_back(std::string(500, ' ') + "a" + std::string(300, '\n'));
  std::string cjk;
  for (int i = 0; i < 800; ++i) utf8_append_codepoint(0x4E00 + (i * 7919) % 0x5000, &cjk);
  texts.push_back(cjk);
  const std::string dir = testing::make_temp_dir();
  tok_test::write_json(dir + "/texts.json", texts);
  ASSERT_TRUE(tok_test::run_script("hf_reference.py", "json " + tok_test::llama3_tokenizer_path() +
                                                          " " + dir + "/texts.json " + dir +
                                                          "/ref.json"));
  const auto ref = tok_test::read_json(dir + "/ref.json");
  ASSERT_EQ(ref["ids"].size(), texts.size());
  int mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto want = ref["ids"][i].get<std::vector<int32_t>>();
    const auto got = tok.encode(texts[i], {.parse_special = true});
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << "text #" << i << ": " << nlohmann::json(texts[i]).dump()
                    << "\n got:  " << nlohmann::json(got).dump()
                    << "\n want: " << nlohmann::json(want).dump();
    }
    EXPECT_EQ(tok.decode(want), ref["decoded"][i].get<std::string>());
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(TokenizerRandom, RoundTripAndStreaming) {
  const Tokenizer& tok = llama3();
  ASSERT_TRUE(tok.loaded());
  const auto texts = random_corpus(11, 3000, 40);
  for (const std::string& text : texts) {
    ASSERT_TRUE(utf8_is_valid(text));
    const auto ids = tok.encode(text);
    ASSERT_EQ(tok.decode(ids), text) << nlohmann::json(text).dump();
    StreamDetokenizer stream(tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      ASSERT_TRUE(utf8_is_valid(piece));
      streamed += piece;
    }
    streamed += stream.finish();
    ASSERT_EQ(streamed, text);
  }
}

TEST(TokenizerRandom, StreamingEqualsDecodeOnRandomIds) {
  const Tokenizer& tok = llama3();
  ASSERT_TRUE(tok.loaded());
  std::mt19937 rng(5);
  // Byte tokens (ids of single bytes >= 0x80) make ill-formed sequences likely.
  std::vector<int32_t> byte_ids;
  for (int b = 0x80; b < 0x100; ++b) {
    for (int32_t id = 0; id < 128000; ++id) {
      const auto tb = tok.token_bytes(id);
      if (tb.size() == 1 && static_cast<unsigned char>(tb[0]) == b) {
        byte_ids.push_back(id);
        break;
      }
    }
  }
  ASSERT_EQ(byte_ids.size(), 128u);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 12);
    for (auto& id : ids) {
      const int k = rng() % 10;
      id = k < 5 ? byte_ids[rng() % byte_ids.size()] : k < 9 ? rng() % 128256 : -1;
    }
    const bool skip = trial % 2 == 1;
    StreamDetokenizer stream(tok, {.skip_special = skip});
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      ASSERT_TRUE(utf8_is_valid(piece));
      streamed += piece;
      ASSERT_LE(stream.pending_bytes(), 3u);
    }
    streamed += stream.finish();
    ASSERT_EQ(streamed, tok.decode(ids, {.skip_special = skip})) << nlohmann::json(ids).dump();
  }
}

TEST(TokenizerRandom, BatchAndConcurrentEncodeAgree) {
  const Tokenizer& tok = llama3();
  ASSERT_TRUE(tok.loaded());
  const auto texts = random_corpus(13, 400, 80);
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) want.push_back(tok.encode(t));
  EXPECT_EQ(tok.encode_batch(texts, {}, 3), want);
  EXPECT_EQ(tok.encode_batch(texts, {}, 1), want);
  // Plain threads sharing one tokenizer (each with its own piece cache).
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < texts.size(); i += 2) bad[t] += tok.encode(texts[i]) != want[i];
    });
  }
  for (auto& th : threads) th.join();
  for (int b : bad) EXPECT_EQ(b, 0);
}

TEST(Utf8, LossyDecodeMatchesPythonReplace) {
  std::mt19937 rng(3);
  std::vector<std::vector<int>> cases;
  std::vector<std::string> inputs;
  const std::vector<std::vector<int>> fixed = {
      {0xE0, 0x80, 0x80}, {0xED, 0xA0, 0x80}, {0xF4, 0x90, 0x80, 0x80}, {0xF0, 0x9F, 0x98},
      {0xC0, 0xAF}, {0xE2, 0x82}, {0xF8, 0x88, 0x80, 0x80, 0x80}, {0x61, 0xF1, 0x80, 0x41}};
  for (const auto& f : fixed) cases.push_back(f);
  const std::vector<int> interesting = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF,
                                        0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEF, 0xF0,
                                        0xF1, 0xF4, 0xF5, 0xFF};
  for (int i = 0; i < 3000; ++i) {
    std::vector<int> b(rng() % 9);
    for (int& x : b) x = interesting[rng() % interesting.size()];
    cases.push_back(b);
  }
  for (const auto& c : cases) inputs.emplace_back(c.begin(), c.end());
  const std::string dir = testing::make_temp_dir();
  tok_test::write_json(dir + "/bytes.json", cases);
  ASSERT_TRUE(tok_test::run_script("hf_reference.py", "lossy " + dir + "/bytes.json " + dir +
                                                          "/out.json"));
  const auto ref = tok_test::read_json(dir + "/out.json");
  ASSERT_EQ(ref["decoded"].size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string want = ref["decoded"][i];
    ASSERT_EQ(utf8_lossy(inputs[i]), want) << "case " << i;
    // Streaming in two parts at every split point gives the same text.
    for (size_t cut = 0; cut <= inputs[i].size(); ++cut) {
      std::string out;
      std::string pending = inputs[i].substr(0, cut);
      const size_t used = utf8_append_lossy(pending, false, &out);
      pending = pending.substr(used) + inputs[i].substr(cut);
      utf8_append_lossy(pending, true, &out);
      ASSERT_EQ(out, want) << "case " << i << " cut " << cut;
    }
  }
}

}  // namespace
}  // namespace lancet
