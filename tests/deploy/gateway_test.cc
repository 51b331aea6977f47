// The gateway's failure handling on purpose-made failures: gateway_check.py runs the real
// HAProxy on deploy/haproxy.cfg in front of three stand-in replicas it controls and checks the
// retries (503, unanswered, never after headers), the circuit breaker (5 consecutive 500s,
// closed again by health checks), /health-driven removal and the long pool's backups.
#include <gtest/gtest.h>

#include "test_paths.h"

namespace lancet::testing {
namespace {

TEST(Gateway, RetriesCircuitBreakerHealthAndBackups) {
  const std::string dir = make_temp_dir();
  ASSERT_FALSE(dir.empty());
  std::string out;
  const int rc = run_command(python() + " " + source_dir() + "/tests/deploy/gateway_check.py --source-dir " +
                                 source_dir() + " --work-dir " + dir,
                             &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS gateway"), std::string::npos) << out;
}

}  // namespace
}  // namespace lancet::testing
