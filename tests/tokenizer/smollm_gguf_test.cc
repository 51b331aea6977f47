// SmolLM2 tokenizer built from the GGUF vocabulary (dumped with the PyPI `gguf` reader, not
// lancet's) against HF `tokenizers` built from the same vocabulary with SmolLM2's
// tokenizer.json pipeline (Digits(individual) + ByteLevel GPT-2 regex), on the golden fixture
// texts and a random corpus.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace lancet {
namespace {

struct SmolFixture {
  std::string dir;
  GgufVocab vocab;
  bool ok = false;
};

const SmolFixture& smol() {
  static const SmolFixture f = [] {
    SmolFixture s;
    const std::string model = testing::default_model();
    if (model.empty()) return s;
    s.dir = testing::make_temp_dir();
    if (!tok_test::run_script("gguf_vocab_dump.py", model + " " + s.dir + "/vocab.json")) return s;
    const auto j = tok_test::read_json(s.dir + "/vocab.json");
    s.vocab.model = j["model"];
    s.vocab.pre = j["pre"];
    s.vocab.tokens = j["tokens"].get<std::vector<std::string>>();
    s.vocab.token_types = j["token_type"].get<std::vector<int32_t>>();
    s.vocab.merges = j["merges"].get<std::vector<std::string>>();
    s.vocab.bos_id = j.value("bos_token_id", -1);
    s.vocab.eos_id = j.value("eos_token_id", -1);
    s.vocab.pad_id = j.value("padding_token_id", -1);
    s.vocab.add_bos = j.value("add_bos_token", false);
    s.ok = true;
    return s;
  }();
  return f;
}

TEST(SmolLmGguf, MatchesHfOnFixtureAndRandomTexts) {
  const SmolFixture& f = smol();
  if (testing::default_model().empty()) FAIL() << "SmolLM2 GGUF not fetched";
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.vocab.pre, "smollm");
  auto tok = Tokenizer::from_gguf_vocab(f.vocab);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->special_ids().bos, 1);
  EXPECT_EQ(tok->special_ids().eos, 2);
  EXPECT_EQ(tok->special_ids().eot, 2);  // <|im_end|>, found by name
  EXPECT_FALSE(tok->add_bos_by_default());
  EXPECT_TRUE(tok->is_special(1));

  std::vector<std::string> texts;
  const auto golden = tok_test::read_json(testing::fixture_dir("tokenizer-golden-llama3.json"));
  for (const auto& row : golden["encode"]) texts.push_back(row["text"]);
  for (const auto& c : golden["chat"]) texts.push_back(c["text"]);
  texts.push_back("<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n<|im_start|>assistant\n");
  texts.push_back("a 1 22  333\t\t4444 x5y6 ١٢٣ ²");
  std::mt19937 rng(17);
  for (int i = 0; i < 800; ++i) texts.push_back(tok_test::random_text(rng, 1 + rng() % 50));

  tok_test::write_json(f.dir + "/texts.json", texts);
  ASSERT_TRUE(tok_test::run_script("hf_reference.py", "gguf " + f.dir + "/vocab.json " + f.dir +
                                                          "/texts.json " + f.dir + "/ref.json"));
  const auto ref = tok_test::read_json(f.dir + "/ref.json");
  ASSERT_EQ(ref["ids"].size(), texts.size());
  int mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto want = ref["ids"][i].get<std::vector<int32_t>>();
    const auto got = tok->encode(texts[i], {.parse_special = true});
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << "text #" << i << ": " << nlohmann::json(texts[i]).dump()
                    << "\n got:  " << nlohmann::json(got).dump()
                    << "\n want: " << nlohmann::json(want).dump();
    }
    EXPECT_EQ(tok->decode(want), ref["decoded"][i].get<std::string>()) << i;
  }
  EXPECT_EQ(mismatches, 0);
  // Concrete values: digits are split one by one, and chat markers are control tokens.
  EXPECT_EQ(tok->encode("<|im_start|>", {.parse_special = true}), std::vector<int32_t>{1});
  const auto digits = tok->encode("2024");
  EXPECT_EQ(digits.size(), 4u);
  EXPECT_EQ(tok->decode(digits), "2024");
}

TEST(SmolLmGguf, RejectsUnsupportedVocabularies) {
  GgufVocab v;
  v.model = "llama";  // SentencePiece
  v.tokens = {"a"};
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(), StatusCode::kUnimplemented);
  v.model = "gpt2";
  v.pre = "some-new-pre";
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(), StatusCode::kUnimplemented);
  v.pre = "gpt2";
  v.token_types = {1, 1};
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(), StatusCode::kInvalidArgument);
  v.token_types = {1};
  v.merges = {"ab"};
  EXPECT_EQ(Tokenizer::from_gguf_vocab(v).status().code(), StatusCode::kInvalidArgument);
}

TEST(SmolLmGguf, LlamaBpePreUsesLlama3Rules) {
  // A GGUF-style vocabulary rebuilt from the Llama 3 tokenizer.json must encode like it.
  const auto j = tok_test::read_json(tok_test::llama3_tokenizer_path());
  GgufVocab v;
  v.model = "gpt2";
  v.pre = "llama-bpe";
  v.tokens.resize(128256);
  v.token_types.assign(128256, kGgufTokenNormal);
  for (const auto& [text, id] : j["model"]["vocab"].items()) v.tokens[id.get<int>()] = text;
  for (const auto& a : j["added_tokens"]) {
    v.tokens[a["id"].get<int>()] = a["content"];
    v.token_types[a["id"].get<int>()] = kGgufTokenControl;
  }
  for (const auto& m : j["model"]["merges"]) {
    v.merges.push_back(m.is_string() ? m.get<std::string>()
                                     : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  v.bos_id = 128000;
  v.eos_id = 128009;
  v.add_bos = true;
  auto tok = Tokenizer::from_gguf_vocab(v);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->special_ids().eot, 128009);
  const auto golden = tok_test::read_json(testing::fixture_dir("tokenizer-golden-llama3.json"));
  for (const auto& row : golden["encode"]) {
    EXPECT_EQ(tok->encode(row["text"].get<std::string>(), {.parse_special = true, .add_bos = true}),
              row["ids_with_special"].get<std::vector<int32_t>>())
        << row["text"];
  }
}

}  // namespace
}  // namespace lancet
