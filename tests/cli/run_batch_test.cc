// `lancet run-batch` on the default model: one result line per input line in input order, in
// the Batch API's result format (the same fields /v1/batches writes), greedy chat and
// completion bodies equal to `lancet generate`, bad lines as error entries; a missing, empty
// or unreadable input is exit 1 with a message naming the file.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace lancet {
namespace {

using nlohmann::json;

std::string model_flags() {
  return " --model " + testing::default_model() + " --threads 2 --max-model-len 512 --kv-cache-memory 134217728";
}

std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

json generate(const std::string& prompt, bool chat) {
  std::string out;
  const std::string cmd = testing::lancet_binary() + " generate" + model_flags() + " --prompt '" + prompt +
                          "' --max-tokens 8 --temperature 0 --json --quiet" + (chat ? " --chat" : "") + " 2>/dev/null";
  EXPECT_EQ(testing::run_command(cmd, &out), 0) << out;
  return json::parse(out, nullptr, false);
}

TEST(RunBatch, WritesOneResultPerLineInTheBatchFormat) {
  if (testing::default_model().empty()) FAIL() << "default model missing (tools/fetch_model.sh)";
  const std::string dir = testing::make_temp_dir();
  const std::string in = dir + "/in.jsonl", out = dir + "/out.jsonl";
  {
    std::ofstream f(in);
    for (int i = 0; i < 3; ++i)
      f << json{{"custom_id", "chat-" + std::to_string(i)},
                {"method", "POST"},
                {"url", "/v1/chat/completions"},
                {"body", {{"messages", {{{"role", "user"}, {"content", "What is the capital of France?"}}}},
                          {"max_tokens", 8},
                          {"temperature", 0}}}}
               .dump()
        << "\n";
    f << "{broken\n\n";
    f << json{{"custom_id", "text"},
              {"method", "POST"},
              {"url", "/v1/completions"},
              {"body", {{"prompt", "The capital of France is"}, {"max_tokens", 8}, {"temperature", 0}}}}
             .dump()
      << "\n";
    f << json{{"custom_id", "too-long"},
              {"method", "POST"},
              {"url", "/v1/completions"},
              {"body", {{"prompt", "x"}, {"max_tokens", 5000}}}}
             .dump()
      << "\n";
  }
  std::string log;
  ASSERT_EQ(testing::run_command(testing::lancet_binary() + " run-batch " + in + " " + out + model_flags(), &log), 0)
      << log;
  EXPECT_NE(log.find("6 requests: 4 completed, 2 failed"), std::string::npos) << log;
  const auto lines = read_jsonl(out);
  ASSERT_EQ(lines.size(), 6u);
  for (const json& l : lines) {
    // The fields of the Batch API's output and error files.
    EXPECT_TRUE(l.contains("id") && l.contains("custom_id") && l.contains("response") && l.contains("error")) << l;
    EXPECT_EQ(l["id"].get<std::string>().rfind("batch_req_", 0), 0u);
  }
  const json ref_chat = generate("What is the capital of France?", true);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(lines[i]["custom_id"], "chat-" + std::to_string(i));
    EXPECT_EQ(lines[i]["response"]["status_code"], 200);
    EXPECT_TRUE(lines[i]["error"].is_null());
    EXPECT_TRUE(lines[i]["response"]["request_id"].is_string());
    const json& body = lines[i]["response"]["body"];
    EXPECT_EQ(body["object"], "chat.completion");
    EXPECT_EQ(body["choices"][0]["message"]["content"], ref_chat["text"]);
  }
  EXPECT_TRUE(lines[3]["custom_id"].is_null());
  EXPECT_TRUE(lines[3]["response"].is_null());
  EXPECT_EQ(lines[3]["error"]["code"], "invalid_json");
  EXPECT_NE(lines[3]["error"]["message"].get<std::string>().find("line 4"), std::string::npos);
  EXPECT_EQ(lines[4]["custom_id"], "text");
  EXPECT_EQ(lines[4]["response"]["body"]["object"], "text_completion");
  EXPECT_EQ(lines[4]["response"]["body"]["choices"][0]["text"], generate("The capital of France is", false)["text"]);
  EXPECT_EQ(lines[5]["custom_id"], "too-long");
  EXPECT_EQ(lines[5]["response"]["status_code"], 400);
  EXPECT_EQ(lines[5]["response"]["body"]["error"]["code"], "context_length_exceeded");
}

TEST(RunBatch, BadInputFilesExitOneWithAMessage) {
  const std::string dir = testing::make_temp_dir();
  std::string log;
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " run-batch " + dir + "/missing.jsonl " + dir +
                                     "/o.jsonl --model x.gguf",
                                 &log),
            1);
  EXPECT_NE(log.find("missing.jsonl"), std::string::npos) << log;
  {
    std::ofstream f(dir + "/empty.jsonl");
    f << "\n\n";
  }
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " run-batch " + dir + "/empty.jsonl " + dir +
                                     "/o.jsonl --model x.gguf",
                                 &log),
            1);
  EXPECT_NE(log.find("no request lines"), std::string::npos) << log;
  {
    std::ofstream f(dir + "/ok.jsonl");
    f << R"({"custom_id":"a","method":"POST","url":"/v1/completions","body":{"prompt":"x"}})" << "\n";
  }
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " run-batch " + dir + "/ok.jsonl " + dir +
                                     "/no/such/dir/o.jsonl --model x.gguf",
                                 &log),
            1);
  EXPECT_NE(log.find("cannot write"), std::string::npos) << log;
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " run-batch " + dir + "/ok.jsonl", &log), 2) << log;
}

}  // namespace
}  // namespace lancet
