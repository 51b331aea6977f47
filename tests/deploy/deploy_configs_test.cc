// The shipped deployment files checked without running them: the Kubernetes recipe by a
// schema-less lint (k8s_lint.py: keys per kind, cross-references, and breakages it must
// catch), the Prometheus recording rules by promtool's unit tests on known series
// (lancet_rules_test.yml: rates, percentiles, hit ratios, cost per 1000 requests), and the
// HAProxy config by `haproxy -c` with the environment it documents.
#include <gtest/gtest.h>

#include "test_paths.h"

namespace lancet::testing {
namespace {

TEST(DeployConfigs, KubernetesRecipeLint) {
  std::string out;
  const int rc = run_command(python() + " " + source_dir() + "/tests/deploy/k8s_lint.py " + source_dir() + "/deploy/k8s",
                             &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS k8s_lint"), std::string::npos) << out;
}

TEST(DeployConfigs, PrometheusRulesUnitTests) {
  std::string out;
  const int rc = run_command("cd " + source_dir() + "/tests/deploy && promtool test rules lancet_rules_test.yml", &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("SUCCESS"), std::string::npos) << out;
}

TEST(DeployConfigs, HaproxyConfigValid) {
  std::string out;
  const std::string two = "LANCET_REPLICA_1=127.0.0.1:8001 LANCET_REPLICA_2=127.0.0.1:8002 ";
  const std::string check = "haproxy -c -f " + source_dir() + "/deploy/haproxy.cfg";
  EXPECT_EQ(run_command("env " + two + "LANCET_REPLICA_3=127.0.0.1:8003 " + check, &out), 0) << out;
  // The replicas are required: a config started without them must not come up half-configured.
  EXPECT_NE(run_command("env -u LANCET_REPLICA_3 " + two + check, &out), 0) << out;
}

}  // namespace
}  // namespace lancet::testing
