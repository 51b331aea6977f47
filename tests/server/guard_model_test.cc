// The guard model's pieces (server/guard_model.h): reading its answer, the safety task written
// for a model whose template does not write it, and a completion session's verdicts through a
// guard double (unsafe is a 400 content_filter naming the categories; a guard that cannot
// answer lets the prompt through, counted as an error).
#include "server/guard_model.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "server/completion_session.h"
#include "server/metrics.h"
#include "server/openai_json.h"
#include "token_id_model.h"

namespace lancet::server {
namespace {

TEST(GuardModel, AnswersAreReadAsLlamaGuardWritesThem) {
  EXPECT_EQ(parse_guard_answer("safe").kind, GuardVerdict::Kind::kSafe);
  EXPECT_EQ(parse_guard_answer("\n\n  Safe \n").kind, GuardVerdict::Kind::kSafe);
  const GuardVerdict u = parse_guard_answer("unsafe\nS1,S10, S14\n");
  EXPECT_EQ(u.kind, GuardVerdict::Kind::kUnsafe);
  EXPECT_EQ(u.categories, (std::vector<std::string>{"S1", "S10", "S14"}));
  const GuardVerdict bare = parse_guard_answer("UNSAFE");
  EXPECT_EQ(bare.kind, GuardVerdict::Kind::kUnsafe);
  EXPECT_TRUE(bare.categories.empty());
  for (const char* other : {"", "   \n", "The content is safe.", "unsafe-ish", "maybe\nsafe"})
    EXPECT_EQ(parse_guard_answer(other).kind, GuardVerdict::Kind::kUnknown) << other;
  EXPECT_LE(parse_guard_answer(std::string(1000, 'x')).answer.size(), 200u);
  EXPECT_STREQ(verdict_name(GuardVerdict::Kind::kUnsafe), "unsafe");
}

TEST(GuardModel, TaskTextCarriesTheConversationAndTheCategories) {
  const nlohmann::ordered_json conv = {{{"role", "system"}, {"content", "be nice"}},
                                       {{"role", "user"}, {"content", "How do I bake bread?"}},
                                       {{"role", "assistant"}, {"content", "Mix flour and water."}},
                                       {{"role", "user"}, {"content", "And then?"}}};
  const std::string t = guard_task_text(conv);
  EXPECT_NE(t.find("User: How do I bake bread?\n\nAgent: Mix flour and water.\n\nUser: And then?"), std::string::npos) << t;
  EXPECT_EQ(t.find("be nice"), std::string::npos);  // system turns are not classified
  EXPECT_NE(t.find("S1: Violent Crimes."), std::string::npos);
  EXPECT_NE(t.find("S14: Code Interpreter Abuse."), std::string::npos);
  EXPECT_NE(t.find("ONLY THE LAST User message"), std::string::npos);
  EXPECT_NE(t.find("First line must read 'safe' or 'unsafe'."), std::string::npos);
  // Ending with the assistant's turn, the assessment is of that turn.
  const std::string a = guard_task_text(nlohmann::ordered_json::array(
      {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "hello"}}}));
  EXPECT_NE(a.find("ONLY THE LAST Agent message"), std::string::npos);
}

// A guard that answers as told, and records what it was asked.
class ScriptedGuard : public GuardModel {
 public:
  explicit ScriptedGuard(StatusOr<GuardVerdict> answer) : answer_(std::move(answer)) {}
  StatusOr<GuardVerdict> classify(const nlohmann::ordered_json& conversation) const override {
    asked.push_back(conversation);
    return answer_;
  }
  mutable std::vector<nlohmann::ordered_json> asked;

 private:
  StatusOr<GuardVerdict> answer_;
};

std::optional<ApiError> submit(const std::string& body, const GuardModel& guard, Metrics* metrics, bool chat) {
  ApiRequest req;
  const auto err = chat ? parse_chat_request(body, RequestLimits{}, &req) : parse_completion_request(body, RequestLimits{}, &req);
  EXPECT_FALSE(err.has_value());
  // Its engine is never reached here: the guard answers first, or encoding fails for want of a
  // tokenizer.
  testing::TokenIdServingModel model(nullptr, "m", 128, 10);
  CompletionSession session(&model, metrics, std::move(req), 0);
  session.set_guard_model(&guard);
  return session.submit();
}

TEST(GuardModel, UnsafeIsAContentFilterErrorNamingTheCategories) {
  GuardVerdict unsafe;
  unsafe.kind = GuardVerdict::Kind::kUnsafe;
  unsafe.categories = {"S1", "S9"};
  unsafe.seconds = 0.02;
  ScriptedGuard guard(unsafe);
  Metrics metrics;
  const auto e = submit(R"({"messages": [{"role": "user", "content": "bad"}], "max_tokens": 4})", guard, &metrics, true);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->code, "content_filter");
  EXPECT_EQ(e->param, "messages");
  EXPECT_EQ(e->message, "the prompt was blocked by the guard model (categories S1, S9)");
  ASSERT_EQ(guard.asked.size(), 1u);
  EXPECT_EQ(guard.asked[0][0]["content"], "bad");
  // Completions: each prompt is one user turn.
  const auto c = submit(R"({"prompt": ["fine", "bad"], "max_tokens": 4})", guard, &metrics, false);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->param, "prompt");
  EXPECT_EQ(guard.asked.back()[0]["role"], "user");
  const std::string text = metrics.render("m", EngineStats{}, 0);
  EXPECT_NE(text.find(R"(lancet:guard_model_verdicts_total{model_name="m",verdict="unsafe"} 2)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(lancet:guard_model_unsafe_categories_total{model_name="m",category="S9"} 2)"), std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(lancet:guard_model_seconds_count{model_name="m"} 2)"), std::string::npos) << text;
}

TEST(GuardModel, SafeOrFailedClassificationsLetThePromptThrough) {
  Metrics metrics;
  GuardVerdict safe;
  safe.kind = GuardVerdict::Kind::kSafe;
  ScriptedGuard ok(safe);
  ScriptedGuard broken(ResourceExhausted("guard model: no answer within 1 s"));
  for (const GuardModel* g : {static_cast<const GuardModel*>(&ok), static_cast<const GuardModel*>(&broken)}) {
    const auto e = submit(R"({"prompt": "hello", "max_tokens": 4})", *g, &metrics, false);
    // Past the guard, the prompt meets this model's missing tokenizer: not a content filter.
    ASSERT_TRUE(e.has_value());
    EXPECT_NE(e->code, "content_filter") << e->message;
  }
  const std::string text = metrics.render("m", EngineStats{}, 0);
  EXPECT_NE(text.find(R"(verdict="safe"} 1)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(verdict="error"} 1)"), std::string::npos) << text;
}

}  // namespace
}  // namespace lancet::server
