// Tool calling end to end on the default SmolLM2 model: `lancet serve` driven by the official
// openai client (tests/server/tool_calls_check.py): a named tool_choice, the same streamed and
// reassembled, the round trip with a tool result, "required" over two tools, "auto", and the
// 400s, with every call's arguments validated by jsonschema.
#include <gtest/gtest.h>

#include "server_process.h"
#include "test_paths.h"

namespace lancet::testing {
namespace {

TEST(ToolCallsE2E, NamedStreamedRoundTripRequiredAutoAndRefusals) {
  if (default_model().empty()) FAIL() << "default model missing (tools/fetch_model.sh)";
  ServerProcess server;
  std::string err;
  const std::vector<std::string> flags = {default_model(), "--api-key", "tools-key", "--max-model-len", "1024",
                                          "--kv-cache-memory", "134217728", "--threads", "2"};
  ASSERT_TRUE(server.start(flags, &err) && server.wait_healthy(60, &err)) << err;
  const std::string cmd = python() + " " + source_dir() + "/tests/server/tool_calls_check.py --base-url " +
                          server.base_url() + " --api-key tools-key";
  std::string out;
  EXPECT_EQ(run_command(cmd, &out), 0) << out << "\nserver log:\n" << server.log();
  EXPECT_NE(out.find("PASS tools"), std::string::npos) << out;
  EXPECT_EQ(server.stop(SIGTERM, 60), 0) << server.log();
}

}  // namespace
}  // namespace lancet::testing
