// `lancet serve` on a tiny Hugging Face checkpoint that ships no tokenizer: /v1/completions
// takes token-id prompts and the greedy continuation (read back through logprobs as
// "token_id:N") equals the one Hugging Face wrote into the fixture; text prompts and chat are
// clear 400s.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "server_process.h"
#include "test_paths.h"

namespace lancet::testing {
namespace {

std::vector<int32_t> ids_of(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  const int32_t* p = static_cast<const int32_t*>(t->data);
  return std::vector<int32_t>(p, p + t->numel());
}

TEST(ServerTinyFixture, TokenIdPromptsMatchHuggingFaceGreedy) {
  const std::string dir = fixture_dir("tiny-llama32");
  auto golden = SafetensorsFile::open(dir + "/golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  ServerProcess server;
  std::string err;
  ASSERT_TRUE(server.start({dir, "--threads", "2", "--max-model-len", "256", "--kv-cache-memory", "16777216"}, &err) &&
              server.wait_healthy(60, &err))
      << err;
  httplib::Client cli("127.0.0.1", server.port());
  cli.set_read_timeout(120);
  for (const char* name : {"case1", "case2"}) {
    const std::vector<int32_t> prompt = ids_of(**golden, std::string(name) + ".input_ids");
    const std::vector<int32_t> greedy = ids_of(**golden, std::string(name) + ".greedy");
    ASSERT_FALSE(prompt.empty());
    ASSERT_GE(greedy.size(), 8u);
    nlohmann::json req = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 0},
                          {"ignore_eos", true}};
    auto r = cli.Post("/v1/completions", req.dump(), "application/json");
    ASSERT_TRUE(r) << "no response";
    ASSERT_EQ(r->status, 200) << r->body;
    auto j = nlohmann::json::parse(r->body);
    std::vector<int32_t> got;
    for (const auto& tok : j["choices"][0]["logprobs"]["tokens"]) {
      const std::string s = tok.get<std::string>();
      ASSERT_EQ(s.rfind("token_id:", 0), 0u) << s;
      got.push_back(std::stoi(s.substr(9)));
    }
    EXPECT_EQ(got, std::vector<int32_t>(greedy.begin(), greedy.begin() + 8)) << name << ": " << r->body;
    EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
    EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  }
  // Streaming: no text to release, yet one chunk per token (load tests time the gaps), each
  // naming its token in logprobs.
  {
    const std::vector<int32_t> prompt = ids_of(**golden, "case1.input_ids");
    const std::vector<int32_t> greedy = ids_of(**golden, "case1.greedy");
    nlohmann::json req = {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 0},
                          {"ignore_eos", true}, {"stream", true}};
    auto sr = cli.Post("/v1/completions", req.dump(), "application/json");
    ASSERT_TRUE(sr) << "no response";
    ASSERT_EQ(sr->status, 200) << sr->body;
    std::vector<int32_t> streamed;
    size_t pos = 0, chunks = 0;
    while ((pos = sr->body.find("data: {", pos)) != std::string::npos) {
      const size_t end = sr->body.find("\n\n", pos);
      auto j = nlohmann::json::parse(sr->body.substr(pos + 6, end - pos - 6));
      pos = end;
      if (!j.contains("choices") || j["choices"].empty()) continue;
      ++chunks;
      for (const auto& tok : j["choices"][0]["logprobs"]["tokens"])
        streamed.push_back(std::stoi(tok.get<std::string>().substr(9)));
    }
    EXPECT_EQ(chunks, 6u) << sr->body;
    EXPECT_EQ(streamed, std::vector<int32_t>(greedy.begin(), greedy.begin() + 6)) << sr->body;
  }
  auto r = cli.Post("/v1/completions", R"({"prompt": "text", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("no tokenizer"), std::string::npos) << r->body;
  r = cli.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}]})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// Speculative decoding through the server: the target as its own draft keeps the greedy
// continuation of the fixture exactly and reports the request's draft counts in usage.
TEST(ServerTinyFixture, SpeculativeServingKeepsGreedyAndReportsUsage) {
  const std::string dir = fixture_dir("tiny-llama32");
  auto golden = SafetensorsFile::open(dir + "/golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  const std::string spec = nlohmann::json({{"method", "draft"}, {"model", dir}, {"num_speculative_tokens", 3},
                                           {"adaptive", false}})
                               .dump();
  ServerProcess server;
  std::string err;
  ASSERT_TRUE(server.start({dir, "--threads", "2", "--max-model-len", "256", "--kv-cache-memory", "16777216",
                            "--speculative-config", spec},
                           &err) &&
              server.wait_healthy(60, &err))
      << err;
  httplib::Client cli("127.0.0.1", server.port());
  cli.set_read_timeout(120);
  const std::vector<int32_t> prompt = ids_of(**golden, "case1.input_ids");
  const std::vector<int32_t> greedy = ids_of(**golden, "case1.greedy");
  ASSERT_GE(greedy.size(), 8u);
  nlohmann::json req = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 0},
                        {"ignore_eos", true}};
  auto r = cli.Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(r) << "no response";
  ASSERT_EQ(r->status, 200) << r->body;
  auto j = nlohmann::json::parse(r->body);
  std::vector<int32_t> got;
  for (const auto& tok : j["choices"][0]["logprobs"]["tokens"]) got.push_back(std::stoi(tok.get<std::string>().substr(9)));
  EXPECT_EQ(got, std::vector<int32_t>(greedy.begin(), greedy.begin() + 8)) << r->body;
  ASSERT_TRUE(j["usage"].contains("speculative")) << r->body;
  const int64_t drafted = j["usage"]["speculative"]["draft_tokens"].get<int64_t>();
  EXPECT_GT(drafted, 0);
  EXPECT_EQ(j["usage"]["speculative"]["accepted_tokens"].get<int64_t>(), drafted) << r->body;
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// An FP8 KV cache on a checkpoint without scales is calibrated at start; /metrics exports the
// per-layer scales, never left at 1.
TEST(ServerTinyFixture, Fp8KvScalesAreCalibratedAndExported) {
  const std::string dir = fixture_dir("tiny-llama32");
  ServerProcess server;
  std::string err;
  ASSERT_TRUE(server.start({dir, "--threads", "2", "--max-model-len", "256", "--kv-cache-memory", "16777216",
                            "--kv-cache-dtype", "fp8"},
                           &err) &&
              server.wait_healthy(60, &err))
      << err;
  httplib::Client cli("127.0.0.1", server.port());
  auto r = cli.Get("/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  for (const char* kind : {"k", "v"}) {
    const std::string key = std::string("lancet:kv_cache_scale{layer=\"0\",kind=\"") + kind + "\"} ";
    const size_t at = r->body.find(key);
    ASSERT_NE(at, std::string::npos) << key << " missing from\n" << r->body;
    const double v = std::stod(r->body.substr(at + key.size()));
    EXPECT_GT(v, 0.0) << kind;
    EXPECT_NE(v, 1.0) << kind;
  }
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace lancet::testing
