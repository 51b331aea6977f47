// Structured outputs end to end on the default SmolLM2 model: `lancet serve` answers 200
// requests over 20 JSON schemas (chat response_format json_schema and completions guided_json,
// sampled at temperature 0.9 with distinct seeds, concurrently), and every output parses and
// validates with Python's jsonschema (tests/server/structured_outputs_check.py); json_object,
// guided_choice, guided_regex and streaming outputs hold too, and unsupported features are 400s naming the field.
#include <gtest/gtest.h>

#include "server_process.h"
#include "test_paths.h"

namespace lancet::testing {
namespace {

const char* kKey = "structured-key";

class StructuredOutputsE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (default_model().empty()) return;
    server_ = new ServerProcess();
    std::string err;
    // 128 sequences a step: the 200 requests run in two waves (the check sends 128 at a time).
    const std::vector<std::string> flags = {default_model(), "--api-key", kKey, "--max-model-len", "512",
                                            "--kv-cache-memory", "268435456", "--threads", "2",
                                            "--max-num-seqs", "128"};
    if (!server_->start(flags, &err) || !server_->wait_healthy(60, &err)) start_error_ = new std::string(err);
  }
  static void TearDownTestSuite() {
    if (server_) EXPECT_EQ(server_->stop(SIGTERM, 60), 0) << server_->log();
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (default_model().empty()) FAIL() << "default model missing (tools/fetch_model.sh)";
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
  }
  int run_check(const std::string& scenario, std::string* out) {
    const std::string cmd = python() + " " + source_dir() + "/tests/server/structured_outputs_check.py " + scenario +
                            " --base-url " + server_->base_url() + " --api-key " + kKey;
    return run_command(cmd, out);
  }
  static ServerProcess* server_;
  static std::string* start_error_;
};
ServerProcess* StructuredOutputsE2E::server_ = nullptr;
std::string* StructuredOutputsE2E::start_error_ = nullptr;

TEST_F(StructuredOutputsE2E, TwoHundredSchemaOutputsParseAndValidate) {
  std::string out;
  EXPECT_EQ(run_check("schemas", &out), 0) << out << "\nserver log:\n" << server_->log();
  EXPECT_NE(out.find("PASS schemas"), std::string::npos) << out;
}

TEST_F(StructuredOutputsE2E, JsonObjectChoicesRegexStreamingAndRefusals) {
  std::string out;
  EXPECT_EQ(run_check("others", &out), 0) << out << "\nserver log:\n" << server_->log();
  EXPECT_NE(out.find("PASS others"), std::string::npos) << out;
}

}  // namespace
}  // namespace lancet::testing
