// RuntimeConfig's --fp8-attention-math: the values validate() takes and the attention math each
// names on each backend ("auto": the two-term E4M3 query on CUDA, the 16-bit path on the CPU).
#include <gtest/gtest.h>

#include "runtime/runtime.h"

namespace lancet {
namespace {

TEST(RuntimeConfig, Fp8AttentionMathValues) {
  RuntimeConfig rc;
  rc.model = "unused";
  EXPECT_EQ(rc.fp8_attention_math, "auto");
  for (const char* v : {"auto", "f16", "e4m3", "e4m3x2", "e4m3-pv", "e4m3x2-pv"}) {
    rc.fp8_attention_math = v;
    EXPECT_TRUE(rc.validate().ok()) << v << ": " << rc.validate().to_string();
  }
  for (const char* v : {"", "fp16", "E4M3X2", "e4m3x3", "e4m3x2-p"}) {
    rc.fp8_attention_math = v;
    const Status st = rc.validate();
    EXPECT_FALSE(st.ok()) << v;
    EXPECT_NE(st.message().find("--fp8-attention-math"), std::string::npos) << st.to_string();
  }
}

TEST(RuntimeConfig, Fp8AttentionMathResolvesPerBackend) {
  EXPECT_EQ(resolve_fp8_attention_math("auto", "cuda"), Fp8AttentionMath::kE4m3x2Query);
  EXPECT_EQ(resolve_fp8_attention_math("auto", "cpu"), Fp8AttentionMath::kF16);
  for (const char* be : {"cpu", "cuda"}) {
    EXPECT_EQ(resolve_fp8_attention_math("f16", be), Fp8AttentionMath::kF16) << be;
    EXPECT_EQ(resolve_fp8_attention_math("e4m3", be), Fp8AttentionMath::kE4m3Query) << be;
    EXPECT_EQ(resolve_fp8_attention_math("e4m3x2", be), Fp8AttentionMath::kE4m3x2Query) << be;
    EXPECT_EQ(resolve_fp8_attention_math("e4m3-pv", be), Fp8AttentionMath::kE4m3QueryAndP) << be;
    EXPECT_EQ(resolve_fp8_attention_math("e4m3x2-pv", be), Fp8AttentionMath::kE4m3x2QueryAndP) << be;
  }
}

}  // namespace
}  // namespace lancet
