// `lancet serve --guard-rules` on the default model: English and Chinese prompts blocked or
// allowed exactly, a greedy output known to contain a blocked word cut before it (streamed and
// not), and the guard counters in /metrics; `--guard-model` behind the rules.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "server_process.h"
#include "test_paths.h"

namespace lancet::testing {
namespace {

// The default model's greedy answer to kPrompt starts "L'Étoile, la Marseillaise, ...".
const char* kPrompt = "What is the capital of France?";
const char* kRules = R"(rules:
  - id: weapons
    action: block
    keywords: [bomb, 炸弹]
  - id: anthem
    action: block
    keywords: [marseillaise]
  - id: rude
    action: flag
    keywords: [idiot, 笨蛋]
allow:
  - id: bath
    keywords: [bath bomb, 浴盐炸弹]
    exempts: [weapons]
)";

nlohmann::json chat(httplib::Client& cli, const std::string& content, bool stream, int* status, std::string* raw) {
  nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", content}}}},
                         {"max_tokens", 30}, {"temperature", 0}, {"stream", stream}};
  auto r = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  *status = r ? r->status : -1;
  *raw = r ? r->body : "";
  return stream || !r ? nlohmann::json() : nlohmann::json::parse(r->body);
}

TEST(ServerGuard, PromptsAndOutputsClassifiedExactly) {
  if (default_model().empty()) FAIL() << "default model missing (tools/fetch_model.sh)";
  const std::string rules = make_temp_dir() + "/rules.yaml";
  std::ofstream(rules) << kRules;
  ServerProcess server;
  std::string err;
  ASSERT_TRUE(server.start({default_model(), "--guard-rules", rules, "--max-model-len", "512", "--kv-cache-memory",
                            "268435456", "--threads", "2"}, &err) && server.wait_healthy(60, &err)) << err;
  httplib::Client cli("127.0.0.1", server.port());
  cli.set_read_timeout(60);
  int status = 0;
  std::string raw;
  for (const char* blocked : {"How do I make a BOMB?", "如何制造炸弹", "bath bomb or real bomb?"}) {
    const auto j = chat(cli, blocked, false, &status, &raw);
    EXPECT_EQ(status, 400) << blocked;
    EXPECT_EQ(j["error"]["code"], "content_filter") << raw;
    EXPECT_EQ(j["error"]["message"], "the prompt was blocked by content rule 'weapons'") << raw;
  }
  for (const char* allowed : {"I like a bath bomb", "我喜欢浴盐炸弹", "you idiot, hi", "你好"}) {
    chat(cli, allowed, false, &status, &raw);
    EXPECT_EQ(status, 200) << allowed << raw;
  }
  const auto j = chat(cli, kPrompt, false, &status, &raw);
  ASSERT_EQ(status, 200) << raw;
  EXPECT_EQ(j["choices"][0]["message"]["content"], "L'Étoile, la ") << raw;
  EXPECT_EQ(j["choices"][0]["finish_reason"], "content_filter") << raw;

  chat(cli, kPrompt, true, &status, &raw);
  ASSERT_EQ(status, 200);
  std::string text, last_reason;
  for (size_t pos = raw.find("data: {"); pos != std::string::npos; pos = raw.find("data: {", pos + 1)) {
    const auto c = nlohmann::json::parse(raw.substr(pos + 6, raw.find('\n', pos) - pos - 6));
    if (c["choices"].empty()) continue;
    const auto& ch = c["choices"][0];
    if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) last_reason = ch["finish_reason"];
  }
  EXPECT_EQ(text, "L'Étoile, la ");
  EXPECT_EQ(last_reason, "content_filter");
  EXPECT_EQ(raw.find("arseill"), std::string::npos);

  auto m = cli.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("rule=\"weapons\",action=\"block\",where=\"prompt\"} 3"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("rule=\"rude\",action=\"flag\",where=\"prompt\"} 1"), std::string::npos);
  EXPECT_NE(m->body.find("rule=\"anthem\",action=\"block\",where=\"output\"} 2"), std::string::npos);
  EXPECT_NE(m->body.find("lancet:guard_seconds_count"), std::string::npos);
  EXPECT_EQ(server.stop(SIGTERM, 60), 0);
}

// --guard-model (the default model itself as the guard): prompts the rules pass are classified,
// one verdict each, always a readable one (the answer is generated under the verdict's
// grammar), deterministically (greedy); unsafe is a 400 content_filter, safe is served; what
// the rules block never reaches the guard.
double metric_value(const std::string& text, const std::string& series) {
  const size_t at = text.find(series + " ");
  return at == std::string::npos ? 0 : std::stod(text.substr(at + series.size() + 1));
}

TEST(ServerGuard, GuardModelClassifiesWhatTheRulesPass) {
  if (default_model().empty()) FAIL() << "default model missing (tools/fetch_model.sh)";
  const std::string rules = make_temp_dir() + "/rules.yaml";
  std::ofstream(rules) << kRules;
  ServerProcess server;
  std::string err;
  ASSERT_TRUE(server.start({default_model(), "--guard-rules", rules, "--guard-model", default_model(),
                            "--guard-model-max-model-len", "1024", "--guard-model-kv-cache-memory", "67108864",
                            "--max-model-len", "512", "--kv-cache-memory", "67108864", "--threads", "2"},
                           &err) &&
              server.wait_healthy(90, &err))
      << err;
  EXPECT_NE(server.log().find("guard model 'SmolLM2-135M-Instruct.Q4_1.gguf' loaded"), std::string::npos)
      << server.log();
  httplib::Client cli("127.0.0.1", server.port());
  cli.set_read_timeout(90);
  int status = 0;
  std::string raw;
  chat(cli, "How do I make a bomb?", false, &status, &raw);  // the rules block it first
  EXPECT_EQ(status, 400);
  const std::vector<std::string> prompts = {"What is the capital of France?", "Write a haiku about rain.",
                                            "How do I hurt someone and get away with it?"};
  int blocked = 0;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto j = chat(cli, prompts[i], false, &status, &raw);
      ASSERT_TRUE(status == 200 || status == 400) << raw;
      if (status == 400) {
        EXPECT_EQ(j["error"]["code"], "content_filter") << raw;
        EXPECT_EQ(j["error"]["message"].get<std::string>().rfind("the prompt was blocked by the guard model", 0), 0u)
            << raw;
      }
      static std::vector<int> first(3);
      if (round == 0) first[i] = status;
      else EXPECT_EQ(status, first[i]) << "the same prompt, the same verdict: " << prompts[i];
      blocked += status == 400;
    }
  }
  auto m = cli.Get("/metrics");
  ASSERT_TRUE(m);
  const std::string l = "{model_name=\"SmolLM2-135M-Instruct.Q4_1.gguf\"";
  const double safe = metric_value(m->body, "lancet:guard_model_verdicts_total" + l + ",verdict=\"safe\"}");
  const double unsafe = metric_value(m->body, "lancet:guard_model_verdicts_total" + l + ",verdict=\"unsafe\"}");
  EXPECT_EQ(safe + unsafe, 6) << m->body;  // one readable verdict per prompt the rules passed
  EXPECT_EQ(unsafe, blocked) << m->body;
  EXPECT_EQ(m->body.find("verdict=\"unknown\""), std::string::npos) << m->body;
  EXPECT_EQ(metric_value(m->body, "lancet:guard_model_seconds_count" + l + "}"), 6) << m->body;
  EXPECT_EQ(server.stop(SIGTERM, 60), 0);
}

TEST(ServerGuard, GuardModelThatDoesNotFitStopsTheStartNamingItsFlags) {
  ServerProcess server;
  std::string err;
  EXPECT_FALSE(server.start({default_model(), "--guard-model", default_model(), "--guard-model-max-model-len", "1024",
                             "--guard-model-kv-cache-memory", "1048576"},
                            &err) &&
               server.wait_healthy(30, &err));
  EXPECT_NE(err.find("--guard-model: the KV cache"), std::string::npos) << err;
  EXPECT_NE(err.find("--guard-model-kv-cache-memory"), std::string::npos) << err;
  ServerProcess missing;
  EXPECT_FALSE(missing.start({default_model(), "--guard-model", "/nonexistent/guard"}, &err) &&
               missing.wait_healthy(30, &err));
  EXPECT_NE(err.find("--guard-model:"), std::string::npos) << err;
}

TEST(ServerGuard, BadRulesFileStopsTheStart) {
  const std::string rules = make_temp_dir() + "/bad.yaml";
  std::ofstream(rules) << "rules:\n  - id: x\n    regexes: ['(']\n";
  ServerProcess server;
  std::string err;
  EXPECT_FALSE(server.start({default_model(), "--guard-rules", rules}, &err));
  EXPECT_NE(err.find(rules + ":2: rule 'x': bad regex"), std::string::npos) << err;
}

}  // namespace
}  // namespace lancet::testing
