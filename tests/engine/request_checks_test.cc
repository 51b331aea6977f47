// The prompt checks shared by the engine, the server and the CLI: exact messages and bounds.
#include "engine/request_checks.h"

#include <gtest/gtest.h>

#include <vector>

namespace lancet {
namespace {

TEST(RequestChecks, TokenIdsOutsideTheVocabularyAreNamed) {
  const std::vector<int32_t> ok{0, 5, 99};
  EXPECT_TRUE(check_token_ids(ok, 100).ok());
  const std::vector<int32_t> high{3, 100, 7};
  Status st = check_token_ids(high, 100);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "token id 100 is outside the vocabulary (size 100)");
  const std::vector<int32_t> negative{-1};
  EXPECT_EQ(check_token_ids(negative, 100).message(), "token id -1 is outside the vocabulary (size 100)");
}

TEST(RequestChecks, ContextLengthCountsPromptAndCompletion) {
  EXPECT_TRUE(check_context_length(90, 10, 100).ok());
  Status st = check_context_length(90, 11, 100);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(st.message(),
            "This model's maximum context length is 100 tokens. However, you requested 101 tokens (90 in the "
            "prompt, 11 in the completion). Please reduce the length of the prompt or completion.");
  EXPECT_EQ(check_context_length(5, 200, 100, "messages").message(),
            "This model's maximum context length is 100 tokens. However, you requested 205 tokens (5 in the "
            "messages, 200 in the completion). Please reduce the length of the messages or completion.");
  // No room for a single generated token is an error even when the prompt alone fits.
  EXPECT_FALSE(check_context_length(100, 0, 100).ok());
  EXPECT_FALSE(check_context_length(0, 0, 100).ok());
}

}  // namespace
}  // namespace lancet
