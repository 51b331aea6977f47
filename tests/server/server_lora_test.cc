// `lancet serve --lora-modules` on tiny-llama3 with the peft adapters of
// tests/data/lora-tiny-llama3, driven by the official openai client
// (tests/server/openai_lora_check.py): listing, per-request adapters with peft's greedy
// tokens, 404s, and run-time loading; without --allow-runtime-lora-updating the load route
// refuses.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "lora_test_data.h"
#include "server_process.h"
#include "test_paths.h"

namespace lancet::testing {
namespace {

std::string adapter_dir(const std::string& name) { return lora_adapter_dir(name); }

std::vector<std::string> flags(bool allow_updates) {
  std::vector<std::string> f = {fixture_dir("tiny-llama3"), "--threads", "2", "--max-model-len", "256",
                                "--kv-cache-memory", "16777216", "--max-loras", "3", "--max-lora-rank", "8",
                                "--lora-modules", "sql=" + adapter_dir("sql"), "chat=" + adapter_dir("chat")};
  if (allow_updates) f.push_back("--allow-runtime-lora-updating");
  return f;
}

TEST(ServerLora, OpenAiClientServesAdaptersByModelName) {
  ServerProcess server;
  std::string err;
  ASSERT_TRUE(server.start(flags(true), &err) && server.wait_healthy(60, &err)) << err;
  nlohmann::json expect = {{"base", "tiny-llama3"}, {"adapters", nlohmann::json::object()}};
  for (const char* name : {"sql", "chat"}) {
    const std::string g = adapter_dir(name) + "/golden.safetensors";
    expect["adapters"][name] = {{"path", adapter_dir(name)},
                                {"prompt", golden_ids(g, "case1.input_ids")},
                                {"greedy", golden_ids(g, "case1.greedy")}};
  }
  const std::string path = make_temp_dir() + "/expect.json";
  std::ofstream(path) << expect.dump();
  std::string out;
  const int rc = run_command(python() + " " + source_dir() + "/tests/server/openai_lora_check.py --base-url " +
                                 server.base_url() + " --expect " + path + " 2>&1",
                             &out);
  EXPECT_EQ(rc, 0) << out << "\n--- server log ---\n" << server.log();
  EXPECT_NE(out.find("openai_lora_check: all checks passed"), std::string::npos) << out;
}

TEST(ServerLora, RunTimeUpdatesAreOffByDefault) {
  ServerProcess server;
  std::string err;
  ASSERT_TRUE(server.start(flags(false), &err) && server.wait_healthy(60, &err)) << err;
  httplib::Client cli("127.0.0.1", server.port());
  auto r = cli.Post("/v1/load_lora_adapter",
                    nlohmann::json{{"lora_name", "x"}, {"lora_path", adapter_dir("sql")}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("--allow-runtime-lora-updating"), std::string::npos) << r->body;
  auto models = cli.Get("/v1/models");
  ASSERT_TRUE(models);
  auto j = nlohmann::json::parse(models->body);
  ASSERT_EQ(j["data"].size(), 3u) << models->body;
  EXPECT_EQ(j["data"][1]["id"], "chat");  // adapters by name after the base model
  EXPECT_EQ(j["data"][2]["id"], "sql");
}

}  // namespace
}  // namespace lancet::testing
