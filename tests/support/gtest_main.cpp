// The main of every test executable (tests/CMakeLists.txt strata_add_test): GoogleTest's, except
// that a run whose cases all skipped (none passed, none failed) exits 77, which ctest reports as
// skipped (SKIP_RETURN_CODE): each executable is one ctest test, so without this an executable whose
// fixture is missing would read as passed. A run with any passing case exits 0 and its skipped cases
// are counted by tests/skip_summary.py from the executable's XML.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const testing::UnitTest& u = *testing::UnitTest::GetInstance();
  if (rc == 0 && u.skipped_test_count() > 0 && u.successful_test_count() == 0 && u.failed_test_count() == 0) return 77;
  return rc;
}
