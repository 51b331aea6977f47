// The replica set behind the real gateway: replica_set_check.py starts three `lancet serve`
// replicas on the default model, HAProxy with deploy/haproxy.cfg and Prometheus with
// deploy/prometheus/, checks length-aware routing and the rate limit, then sends 300 mixed
// requests at concurrency 32 while one replica is drained and restarted and another killed,
// and finally asks Prometheus for every recording rule (the script's header lists each check).
#include <gtest/gtest.h>

#include <iostream>

#include "test_paths.h"

namespace lancet::testing {
namespace {

TEST(ReplicaSet, GatewayRollingRestartKillAndPrometheusRules) {
  if (default_model().empty()) FAIL() << "default model missing (tools/fetch_model.sh)";
  const std::string dir = make_temp_dir();
  ASSERT_FALSE(dir.empty());
  std::string out;
  const std::string cmd = python() + " " + source_dir() + "/tests/deploy/replica_set_check.py --lancet " +
                          lancet_binary() + " --model " + default_model() + " --source-dir " + source_dir() +
                          " --work-dir " + dir;
  const int rc = run_command(cmd, &out);
  std::cout << out;
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS replica_set"), std::string::npos);
}

}  // namespace
}  // namespace lancet::testing
