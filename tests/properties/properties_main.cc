// Main of the property tests: DSAF_PROPERTY_SCALE multiplies the number of cases of every
// property (RapidCheck max_success = 100 x scale; default scale 10, so the 11 properties
// check 11,000 cases in CI); an explicit RC_PARAMS wins. Every failure prints the shrunk
// case, the RapidCheck seed and its reproduce string.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  if (std::getenv("RC_PARAMS") == nullptr) {
    const char* scale = std::getenv("DSAF_PROPERTY_SCALE");
    const long factor = scale ? std::strtol(scale, nullptr, 10) : 10;
    const std::string params = "max_success=" + std::to_string(100 * (factor > 0 ? factor : 1));
    setenv("RC_PARAMS", params.c_str(), 1);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
