// The defect suite's list (tests/server/defect_cases.txt, run by ctest as ServerDefects) names
// cases that exist in this binary: a renamed or deleted case fails here instead of silently
// dropping out of the suite's gtest filter.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace lancet::testing {
namespace {

TEST(DefectSuite, EveryListedCaseExists) {
  std::ifstream in(LANCET_DEFECT_CASES);
  ASSERT_TRUE(in) << LANCET_DEFECT_CASES;
  std::set<std::string> have;
  const ::testing::UnitTest& ut = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < ut.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& ts = *ut.GetTestSuite(i);
    for (int j = 0; j < ts.total_test_count(); ++j) have.insert(std::string(ts.name()) + "." + ts.GetTestInfo(j)->name());
  }
  std::set<int> defects;
  int cases = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, hash;
    int defect = 0;
    fields >> name >> hash >> defect;
    EXPECT_EQ(hash, "#") << line;
    EXPECT_TRUE(have.count(name)) << name << " is listed in defect_cases.txt but is not a test of test_server";
    defects.insert(defect);
    ++cases;
  }
  EXPECT_GE(cases, 10);
  // Every one of the ten defects has at least one case.
  for (int d = 1; d <= 10; ++d) EXPECT_TRUE(defects.count(d)) << "defect " << d << " has no case";
}

}  // namespace
}  // namespace lancet::testing
