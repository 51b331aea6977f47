// `lancet quantize --fp8 --calibrate PROMPTS` on bad input, as a user runs it: a missing or
// empty prompt file, text prompts for a model without a tokenizer, and out-of-range token ids
// are errors that name the file (exit 1, like any other quantize failure, and nothing is
// written); flag misuse is a usage error (exit 2). The scales themselves are checked in
// tests/eval/quantize_calibrate_test.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_paths.h"

namespace fs = std::filesystem;

namespace lancet {
namespace {

struct CmdResult {
  int rc = 0;
  std::string log;
};

CmdResult quantize(const std::string& args) {
  CmdResult r;
  r.rc = testing::run_command(testing::lancet_binary() + " quantize --fp8 " + args, &r.log);
  return r;
}

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string p = dir + "/" + name;
  std::ofstream(p) << text;
  return p;
}

TEST(QuantizeCalibrateCli, BadPromptFilesAreClearErrors) {
  const std::string fx = testing::fixture_dir("tiny-llama32");
  const std::string tmp = testing::make_temp_dir();
  // The exit status of an ordinary quantize failure (input that does not exist).
  const CmdResult base = quantize(tmp + "/no-such-model " + tmp + "/o0");
  ASSERT_EQ(base.rc, 1) << base.log;

  const CmdResult missing = quantize("--calibrate " + tmp + "/missing.txt " + fx + " " + tmp + "/o1");
  EXPECT_EQ(missing.rc, base.rc) << missing.log;
  EXPECT_NE(missing.log.find(tmp + "/missing.txt"), std::string::npos) << missing.log;
  EXPECT_NE(missing.log.find("--calibrate"), std::string::npos) << missing.log;
  EXPECT_FALSE(fs::exists(tmp + "/o1")) << "nothing is written when calibration fails";

  const std::string empty = write_file(tmp, "empty.txt", "# only a comment\n\n   \n");
  const CmdResult e = quantize("--calibrate " + empty + " " + fx + " " + tmp + "/o2");
  EXPECT_EQ(e.rc, base.rc) << e.log;
  EXPECT_NE(e.log.find("no calibration prompts"), std::string::npos) << e.log;
  EXPECT_FALSE(fs::exists(tmp + "/o2"));

  // The fixtures ship no tokenizer: text needs token ids instead; the error names the line.
  const std::string text = write_file(tmp, "text.txt", "{\"prompt_ids\": [1, 2, 3]}\nThe quick brown fox\n");
  const CmdResult t = quantize("--calibrate " + text + " " + fx + " " + tmp + "/o3");
  EXPECT_EQ(t.rc, base.rc) << t.log;
  EXPECT_NE(t.log.find("no tokenizer"), std::string::npos) << t.log;
  EXPECT_NE(t.log.find(text + ":2"), std::string::npos) << t.log;
  EXPECT_NE(t.log.find("prompt_ids"), std::string::npos) << t.log;

  const std::string json_text = write_file(tmp, "json_text.jsonl", "{\"prompt\": \"hello\"}\n");
  const CmdResult jt = quantize("--calibrate " + json_text + " " + fx + " " + tmp + "/o4");
  EXPECT_EQ(jt.rc, base.rc) << jt.log;
  EXPECT_NE(jt.log.find("no tokenizer"), std::string::npos) << jt.log;

  // Ids outside the vocabulary (1024 in the fixture), and lines that are not prompts.
  const std::string range = write_file(tmp, "range.jsonl", "{\"prompt_ids\": [1, 2]}\n{\"prompt_ids\": [5, 1024]}\n");
  const CmdResult r = quantize("--calibrate " + range + " " + fx + " " + tmp + "/o5");
  EXPECT_EQ(r.rc, base.rc) << r.log;
  EXPECT_NE(r.log.find(range + ":2"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find("[0, 1024)"), std::string::npos) << r.log;
  for (const char* bad : {"{\"prompt_ids\": []}\n", "{\"prompt_ids\": [1, \"x\"]}\n", "{\"text\": \"a\"}\n", "{oops\n"}) {
    const std::string p = write_file(tmp, "bad.jsonl", bad);
    const CmdResult b = quantize("--calibrate " + p + " " + fx + " " + tmp + "/o6");
    EXPECT_EQ(b.rc, base.rc) << bad << b.log;
    EXPECT_NE(b.log.find(p + ":1"), std::string::npos) << bad << b.log;
  }
  EXPECT_FALSE(fs::exists(tmp + "/o6"));
}

TEST(QuantizeCalibrateCli, MarginFlagMisuseIsAUsageError) {
  const std::string fx = testing::fixture_dir("tiny-llama32");
  const std::string tmp = testing::make_temp_dir();
  const std::string ids = write_file(tmp, "ids.jsonl", "{\"prompt_ids\": [1, 2, 3]}\n");
  CmdResult r = quantize("--calibrate-margin 2 " + fx + " " + tmp + "/o1");
  EXPECT_EQ(r.rc, 2) << r.log;
  EXPECT_NE(r.log.find("--calibrate-margin needs --calibrate"), std::string::npos) << r.log;
  for (const char* m : {"0.5", "17", "nan"}) {
    r = quantize("--calibrate " + ids + " --calibrate-margin " + m + " " + fx + " " + tmp + "/o2");
    EXPECT_EQ(r.rc, 2) << m << r.log;
    EXPECT_NE(r.log.find("--calibrate-margin must be in [1, 16]"), std::string::npos) << m << r.log;
  }
  EXPECT_FALSE(fs::exists(tmp + "/o1") || fs::exists(tmp + "/o2"));
}

}  // namespace
}  // namespace lancet
