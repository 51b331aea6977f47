// Llama 3 tokenizer against the HF-written golden fixture (shared/fixtures/
// tokenizer-golden-llama3.json): ids, ids with BOS, decode, chat-formatted texts with special
// tokens, and the loader's handling of the file's fields.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace lancet {
namespace {

// The byte-level pieces every test tokenizer.json needs, spelled out as HF writes them.
std::string with_byte_level(std::string json) {
  const std::string pre =
      R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false})";
  for (size_t p; (p = json.find("BL")) != std::string::npos;) json.replace(p, 2, pre);
  return json;
}

using tok_test::llama3;

const nlohmann::json& golden() {
  static const nlohmann::json j =
      tok_test::read_json(testing::fixture_dir("tokenizer-golden-llama3.json"));
  return j;
}

bool has_special_text(const std::string& s) { return s.find("<|") != std::string::npos; }

TEST(TokenizerGolden, LoadsLlama3) {
  const Tokenizer& tok = llama3();
  ASSERT_TRUE(tok.loaded());
  EXPECT_EQ(tok.vocab_size(), 128256);
  EXPECT_EQ(tok.special_ids().bos, 128000);
  EXPECT_EQ(tok.special_ids().eos, 128001);  // <|end_of_text|>
  EXPECT_EQ(tok.special_ids().eot, 128009);  // <|eot_id|>
  EXPECT_TRUE(tok.add_bos_by_default());
  EXPECT_EQ(tok.token_to_id("<|eot_id|>"), 128009);
  EXPECT_EQ(tok.token_to_id("Hello"), 9906);
  EXPECT_EQ(tok.token_to_id("Ġworld"), 1917);
  EXPECT_FALSE(tok.token_to_id("no such token").has_value());
  EXPECT_TRUE(tok.is_special(128009));
  EXPECT_FALSE(tok.is_special(9906));
  EXPECT_EQ(tok.token_bytes(1917), " world");
}

TEST(TokenizerGolden, EncodeMatchesHfOnEveryRow) {
  const Tokenizer& tok = llama3();
  ASSERT_TRUE(tok.loaded());
  const auto& rows = golden()["encode"];
  ASSERT_EQ(rows.size(), 74u);
  int checked = 0;
  for (const auto& row : rows) {
    const std::string text = row["text"];
    const auto ids = row["ids"].get<std::vector<int32_t>>();
    const auto with_bos = row["ids_with_special"].get<std::vector<int32_t>>();
    // HF parses special tokens written in the text by default: parse_special=true matches it.
    EXPECT_EQ(tok.encode(text, {.parse_special = true}), ids) << "text: " << text;
    EXPECT_EQ(tok.encode(text, {.parse_special = true, .add_bos = true}), with_bos)
        << "text: " << text;
    if (!has_special_text(text)) {
      // Without special tokens in the text, the default options give the same ids.
      EXPECT_EQ(tok.encode(text), ids) << "text: " << text;
    }
    EXPECT_EQ(tok.decode(ids), row["decoded"].get<std::string>()) << "text: " << text;
    ++checked;
  }
  EXPECT_EQ(checked, 74);
}

TEST(TokenizerGolden, SpecialTokenTextIsPlainWithoutParseSpecial) {
  const Tokenizer& tok = llama3();
  ASSERT_TRUE(tok.loaded());
  for (const auto& row : golden()["encode"]) {
    const std::string text = row["text"];
    if (!has_special_text(text)) continue;
    const auto ids = tok.encode(text);
    for (int32_t id : ids) EXPECT_LT(id, 128000) << "special id leaked for: " << text;
    EXPECT_EQ(tok.decode(ids), text);
    EXPECT_NE(ids, row["ids"].get<std::vector<int32_t>>());
  }
  // "<|eot_id|>" as plain text: '<|' 'eot' '_id' '|>' (HF with split_special_tokens=True).
  EXPECT_EQ(tok.encode("<|eot_id|>"), (std::vector<int32_t>{27, 91, 68, 354, 851, 91, 29}));
}

TEST(TokenizerGolden, ChatTextsEncodeWithParseSpecial) {
  const Tokenizer& tok = llama3();
  ASSERT_TRUE(tok.loaded());
  const auto& chats = golden()["chat"];
  ASSERT_EQ(chats.size(), 8u);
  for (const auto& c : chats) {
    const std::string text = c["text"];
    EXPECT_EQ(tok.encode(text, {.parse_special = true}), c["ids"].get<std::vector<int32_t>>())
        << text;
  }
}

TEST(TokenizerGolden, DecodeSkipSpecial) {
  const Tokenizer& tok = llama3();
  ASSERT_TRUE(tok.loaded());
  const std::vector<int32_t> ids = {128000, 128006, 882, 128007, 271, 9906, 0, 128009};
  EXPECT_EQ(tok.decode(ids), "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>");
  EXPECT_EQ(tok.decode(ids, {.skip_special = true}), "user\n\nHello!");
  // Out-of-range ids are skipped, like HF.
  EXPECT_EQ(tok.decode(std::vector<int32_t>{9906, -1, 999999, 0}), "Hello!");
}

TEST(TokenizerGolden, InvalidUtf8InputIsRepairedLikeLossyDecode) {
  const Tokenizer& tok = llama3();
  ASSERT_TRUE(tok.loaded());
  const std::string bad = "ab\xFF" "c\xE4\xBD";
  EXPECT_EQ(tok.decode(tok.encode(bad)), "ab\uFFFDc\uFFFD");
}

TEST(TokenizerJson, RejectsWhatItCannotHonour) {
  const std::string base = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
      "merges": ["a b"]}, "decoder": {"type": "ByteLevel"}, )";
  auto ok =
      Tokenizer::from_json_string(with_byte_level(base + R"("pre_tokenizer": BL})"), "t.json");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->encode("abab"), (std::vector<int32_t>{2, 2}));

  auto norm = Tokenizer::from_json_string(
      with_byte_level(base + R"("normalizer": {"type": "NFC"}, "pre_tokenizer": BL})"), "t.json");
  ASSERT_FALSE(norm.ok());
  EXPECT_EQ(norm.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(norm.status().message().find("t.json"), std::string::npos);

  auto bad_merge = Tokenizer::from_json_string(
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b c"]}})", "m.json");
  ASSERT_FALSE(bad_merge.ok());
  EXPECT_NE(bad_merge.status().message().find("merges[0]"), std::string::npos);

  auto wordpiece = Tokenizer::from_json_string(R"({"model": {"type": "WordPiece", "vocab": {}}})",
                                               "w.json");
  EXPECT_EQ(wordpiece.status().code(), StatusCode::kUnimplemented);
  EXPECT_FALSE(Tokenizer::from_json_string("{not json", "x.json").ok());
  EXPECT_EQ(Tokenizer::from_json_file("/nonexistent/tokenizer.json").status().code(),
            StatusCode::kNotFound);
}

TEST(TokenizerJson, MergesAsPairsAndIgnoreMerges) {
  // Merges in the [a, b] form; BPE applies lowest rank first: "abc" -> (b c) first -> a + bc.
  const std::string json = R"({"model": {"type": "BPE",
      "vocab": {"a": 0, "b": 1, "c": 2, "bc": 3, "ab": 4, "abc": 5},
      "merges": [["b", "c"], ["a", "b"]], "ignore_merges": IGNORE},
      "pre_tokenizer": BL, "decoder": {"type": "ByteLevel"}})";
  auto with = [&](const char* v) {
    std::string j = json;
    j.replace(j.find("IGNORE"), 6, v);
    return Tokenizer::from_json_string(with_byte_level(j), "pairs.json");
  };
  auto merging = with("false");
  ASSERT_TRUE(merging.ok()) << merging.status().to_string();
  EXPECT_EQ(merging->encode("abc"), (std::vector<int32_t>{0, 3}));
  // ignore_merges: a piece that is itself a vocab entry is emitted whole.
  auto whole = with("true");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->encode("abc"), (std::vector<int32_t>{5}));
}

TEST(TokenizerJson, AddedTokenStripAndSingleWord) {
  const std::string json = R"({"model": {"type": "BPE",
      "vocab": {"a": 0, "b": 1, "Ġ": 2, "<": 3, ">": 4, "m": 5}, "merges": []},
      "pre_tokenizer": BL, "decoder": {"type": "ByteLevel"},
      "added_tokens": [
        {"id": 6, "content": "<m>", "special": false, "lstrip": true, "rstrip": true,
         "single_word": false, "normalized": false},
        {"id": 7, "content": "ab", "special": false, "lstrip": false, "rstrip": false,
         "single_word": true, "normalized": false}]})";
  // Expected ids are what HF tokenizers 0.23 gives for this file.
  auto tok = Tokenizer::from_json_string(with_byte_level(json), "added.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // lstrip/rstrip absorb the spaces around <m>; non-special added tokens match by default.
  EXPECT_EQ(tok->encode("a  <m>  b"), (std::vector<int32_t>{0, 6, 1}));
  // single_word: "ab" alone matches, inside "aab" it does not.
  EXPECT_EQ(tok->encode("ab"), (std::vector<int32_t>{7}));
  EXPECT_EQ(tok->encode("aab"), (std::vector<int32_t>{0, 0, 1}));
  EXPECT_EQ(tok->encode("a ab"), (std::vector<int32_t>{0, 2, 7}));
}

}  // namespace
}  // namespace lancet
