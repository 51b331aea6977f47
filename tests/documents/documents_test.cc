// The document pipeline's parts: text out of a PDF made here (Poppler) and of text files,
// sentence splitting (ICU) in English and Chinese, numbered blocks, the fit check, citations and
// the JSON extraction check.
#include <gtest/gtest.h>

#include <fstream>

#include "documents/document_prompt.h"
#include "documents/document_text.h"
#include "documents/sentence_blocks.h"
#include "documents/pdf_maker.h"
#include "test_paths.h"

namespace lancet::documents {
namespace {

int64_t words(const std::string& s) {
  int64_t n = 0;
  bool in = false;
  for (char c : s) {
    const bool w = c != ' ';
    n += w && !in;
    in = w;
  }
  return n;
}

std::string write(const std::string& name, const std::string& bytes) {
  const std::string path = testing::make_temp_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(DocumentText, PdfPagesComeOutInOrder) {
  const std::string path = write("doc.pdf", testing::make_pdf({{"The harbour was built in 1820.", "It has a red lighthouse."},
                                                               {"The ferry leaves at nine (every day)."}}));
  auto d = load_document(path);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  ASSERT_EQ(d->pages.size(), 2u);
  EXPECT_NE(d->pages[0].find("The harbour was built in 1820."), std::string::npos) << d->pages[0];
  EXPECT_NE(d->pages[0].find("It has a red lighthouse."), std::string::npos) << d->pages[0];
  EXPECT_NE(d->pages[1].find("The ferry leaves at nine (every day)."), std::string::npos) << d->pages[1];
}

TEST(DocumentText, BadFilesAreClearErrors) {
  const std::string pdf = testing::make_pdf({{"Some text."}});
  auto cut = load_document(write("cut.pdf", pdf.substr(0, 60)));
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("not a readable PDF"), std::string::npos) << cut.status().message();
  auto binary = load_document(write("bin.txt", std::string("abc\xff\xfe", 5)));
  ASSERT_FALSE(binary.ok());
  EXPECT_NE(binary.status().message().find("neither a PDF nor UTF-8 text"), std::string::npos);
  EXPECT_EQ(load_document("/nonexistent/doc.pdf").status().code(), StatusCode::kNotFound);
  auto text = load_document(write("t.txt", "Plain text. Two sentences."));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->pages, std::vector<std::string>{"Plain text. Two sentences."});
}

TEST(SentenceBlocks, SentencesInEnglishAndChinese) {
  auto en = split_sentences("Hello there.  How are\nyou today? Fine, thanks!");
  ASSERT_TRUE(en.ok());
  EXPECT_EQ(*en, (std::vector<std::string>{"Hello there.", "How are you today?", "Fine, thanks!"}));
  auto zh = split_sentences("今天天气很好。我们去公园吧！好的。");
  ASSERT_TRUE(zh.ok());
  EXPECT_EQ(*zh, (std::vector<std::string>{"今天天气很好。", "我们去公园吧！", "好的。"}));
}

TEST(SentenceBlocks, BlocksJoinSentencesUpToTheLimitPerPage) {
  const std::vector<std::string> pages = {"One two three. Four five. Six seven eight nine ten eleven twelve. Last one.",
                                          "Second page here."};
  auto b = make_blocks(pages, 5, words);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 4u);
  EXPECT_EQ((*b)[0].text, "One two three. Four five.");  // 5 words: fits
  EXPECT_EQ((*b)[1].text, "Six seven eight nine ten eleven twelve.");  // longer than the limit: alone
  EXPECT_EQ((*b)[2].text, "Last one.");
  EXPECT_EQ((*b)[3].text, "Second page here.");  // a page starts a new block
  for (size_t i = 0; i < b->size(); ++i) EXPECT_EQ((*b)[i].id, static_cast<int>(i) + 1);
  EXPECT_EQ((*b)[2].page, 1);
  EXPECT_EQ((*b)[3].page, 2);
  EXPECT_EQ((*b)[1].tokens, 7);
  EXPECT_FALSE(make_blocks(pages, 0, words).ok());
}

TEST(DocumentPrompt, BlocksAreTaggedAndTheFitIsChecked) {
  std::vector<ContextBlock> blocks;
  for (int i = 1; i <= 5; ++i) blocks.push_back({i, i, "text of block " + std::to_string(i), 10});
  DocRequest req;
  req.task = DocTask::kAsk;
  req.question = "What is in block 2?";
  const auto m = document_messages(blocks, req);
  ASSERT_EQ(m.size(), 2u);
  const std::string user = m[1]["content"];
  EXPECT_NE(user.find("[CONTEXT_BLOCK_ID:002] text of block 2"), std::string::npos) << user;
  EXPECT_NE(user.find("Question: What is in block 2?"), std::string::npos);
  // A prompt costs 5 tokens plus its blocks' tokens (the tags are counted per block).
  auto cost = [](const nlohmann::ordered_json& msgs) -> StatusOr<int64_t> {
    const std::string u = msgs[1]["content"];
    int64_t n = 5;
    for (size_t p = u.find("[CONTEXT_BLOCK_ID:"); p != std::string::npos; p = u.find("[CONTEXT_BLOCK_ID:", p + 1)) n += 10;
    return n;
  };
  EXPECT_TRUE(check_fits(blocks, req, 20, 75, cost).ok());
  const Status st = check_fits(blocks, req, 20, 50, cost);  // room for 2 blocks
  ASSERT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("3 of 5 blocks (from block 3, page 3, on) do not fit"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("Nothing was cut"), std::string::npos);
}

TEST(DocumentPrompt, CitationsAreParsed) {
  EXPECT_EQ(cited_blocks("See [CONTEXT_BLOCK_ID:003] and [CONTEXT_BLOCK_ID:12]; not [CONTEXT_BLOCK:4]."),
            (std::vector<int>{3, 12}));
  EXPECT_TRUE(cited_blocks("no citations").empty());
  EXPECT_EQ(block_tag(7), "[CONTEXT_BLOCK_ID:007]");
}

TEST(DocumentPrompt, ExtractedJsonIsValidatedAgainstTheSchema) {
  const nlohmann::json schema = nlohmann::json::parse(R"({
    "type": "object", "required": ["name", "items"],
    "properties": {"name": {"type": "string"}, "year": {"type": "integer", "minimum": 1800},
                   "kind": {"enum": ["town", "city"]},
                   "items": {"type": "array", "items": {"type": "object", "required": ["price"],
                             "properties": {"price": {"type": "number"}}}}}})");
  auto ok = extract_json("Here it is:\n```json\n{\"name\": \"Kellin\", \"year\": 1820, \"kind\": \"town\", "
                         "\"items\": [{\"price\": 12}, {\"price\": 3.5}]}\n```", schema);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)["name"], "Kellin");
  auto missing = extract_json(R"({"items": []})", schema);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("$: the required field 'name' is missing"), std::string::npos);
  auto wrong = extract_json(R"(x {"name": "a", "items": [{"price": 1}, {"price": "two"}]} y)", schema);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("$.items[1].price: expected number, got string"), std::string::npos)
      << wrong.status().message();
  EXPECT_FALSE(extract_json(R"({"name": "a", "items": [], "year": 1700})", schema).ok());
  EXPECT_FALSE(extract_json(R"({"name": "a", "items": [], "kind": "village"})", schema).ok());
  EXPECT_FALSE(extract_json("no json at all", schema).ok());
}

}  // namespace
}  // namespace lancet::documents
