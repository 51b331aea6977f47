// `lancet doc` end to end on the default model: a 3-page PDF made here is cut into blocks that
// follow its sentences and pages, the answer's citations all name blocks of the document, a
// document past --max-model-len is reported (nothing cut), a corrupt PDF is a clear error, and
// extract samples under the schema, so its JSON is valid; a schema it cannot take is a clear error.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "documents/pdf_maker.h"
#include "test_paths.h"

namespace lancet {
namespace {

struct DocRun {
  int rc = 0;
  std::string out;  // stdout and stderr
};

DocRun doc(const std::string& args) {
  DocRun r;
  r.rc = testing::run_command(testing::lancet_binary() + " doc " + args + " --model " + testing::default_model() +
                                  " --max-tokens 40 2>&1",
                              &r.out);
  return r;
}

class DocCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(testing::default_model().empty()) << "the default model is missing (make model)";
    dir_ = testing::make_temp_dir();
    pdf_ = dir_ + "/kellin.pdf";
    std::ofstream(pdf_, std::ios::binary) << testing::make_pdf(
        {{"The harbour of Kellin was built in 1820.", "Its lighthouse is painted red and white."},
         {"The town has four thousand inhabitants.", "Most of them work in fishing or on the ferries."},
         {"The ferry to the island leaves every day at nine.", "Tickets cost twelve euros."}});
  }
  std::string dir_, pdf_;
};

TEST_F(DocCli, AskCitesOnlyBlocksOfTheDocument) {
  const DocRun r = doc("ask " + pdf_ + " --question 'When does the ferry leave?'");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  const auto& blocks = j["blocks"];
  ASSERT_EQ(blocks.size(), 3u);  // one block per page: each page's two sentences fit one block
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(blocks[i]["id"], i + 1);
    EXPECT_EQ(blocks[i]["page"], i + 1);
  }
  EXPECT_EQ(blocks[2]["text"], "The ferry to the island leaves every day at nine. Tickets cost twelve euros.");
  EXPECT_FALSE(j["answer"].get<std::string>().empty());
  for (const auto& id : j["cited_blocks"]) EXPECT_TRUE(id.get<int>() >= 1 && id.get<int>() <= 3) << id;
  EXPECT_TRUE(j["unknown_cited_blocks"].empty());
  EXPECT_GT(j["prompt_tokens"].get<int>(), 40);
}

TEST_F(DocCli, ADocumentPastTheContextIsReportedNotCut) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "Sentence " + std::to_string(i) + " says the day was mild and dry. ";
  std::ofstream(dir_ + "/long.txt") << text;
  const DocRun r = doc("summarize " + dir_ + "/long.txt --max-model-len 1024");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("the document does not fit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("do not fit. Nothing was cut"), std::string::npos) << r.out;
}

TEST_F(DocCli, BadInputsAreClearErrors) {
  std::ofstream(dir_ + "/cut.pdf", std::ios::binary) << testing::make_pdf({{"Some text."}}).substr(0, 60);
  DocRun r = doc("summarize " + dir_ + "/cut.pdf");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("not a readable PDF"), std::string::npos) << r.out;
  r = doc("ask " + pdf_);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("ask needs --question"), std::string::npos) << r.out;
  r = doc("translate " + pdf_);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("the task is summarize, ask or extract"), std::string::npos) << r.out;
}

// extract samples the answer under the schema (structured outputs): the JSON is always valid,
// within the schema's bounds (which also keep it inside the 40-token budget).
TEST_F(DocCli, ExtractFollowsTheSchema) {
  std::ofstream(dir_ + "/schema.json") << R"({"type": "object", "required": ["town", "year"], "additionalProperties": false,
      "properties": {"town": {"type": "string", "maxLength": 20}, "year": {"type": "integer", "minimum": 1000, "maximum": 2100}}})";
  const DocRun r = doc("extract " + pdf_ + " --schema " + dir_ + "/schema.json");
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(j["valid"], true) << r.out;
  ASSERT_TRUE(j["json"]["town"].is_string()) << r.out;
  EXPECT_LE(j["json"]["town"].get<std::string>().size(), 20u);
  ASSERT_TRUE(j["json"]["year"].is_number_integer()) << r.out;
  EXPECT_GE(j["json"]["year"].get<int>(), 1000);
  EXPECT_LE(j["json"]["year"].get<int>(), 2100);
}

// A schema the structured-output compiler does not take is a clear error naming the keyword.
TEST_F(DocCli, ExtractWithAnUnsupportedSchemaIsAClearError) {
  std::ofstream(dir_ + "/schema.json") << R"({"type": "string", "format": "email"})";
  const DocRun r = doc("extract " + pdf_ + " --schema " + dir_ + "/schema.json");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("format"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lancet
