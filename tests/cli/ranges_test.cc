// Command-line value lists (cli/arguments.h): accepted forms and clear rejections.
#include "cli/arguments.h"

#include <gtest/gtest.h>

#include "reference/error.h"

namespace dsaf::cli {
namespace {

TEST(ParseContexts, DoublingRangesListsAndUnits) {
  EXPECT_EQ(parse_contexts("2k..64k"),
            (std::vector<int64_t>{2048, 4096, 8192, 16384, 32768, 65536}));
  EXPECT_EQ(parse_contexts("4096,8192"), (std::vector<int64_t>{4096, 8192}));
  EXPECT_EQ(parse_contexts("3000"), (std::vector<int64_t>{3000}));
  EXPECT_EQ(parse_contexts("1m"), (std::vector<int64_t>{1048576}));
  EXPECT_EQ(parse_contexts("8k..8k"), (std::vector<int64_t>{8192}));
}

TEST(ParseContexts, RejectsMalformedRanges) {
  for (const char* bad : {"", "0", "-5", "2k..", "..8k", "8k..2k", "2k..6k", "abc", "2q",
                          "1.5k", "2k,,4k"}) {
    try {
      parse_contexts(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << bad;
    }
  }
}

TEST(ParseReals, RangesWithPointCountsAndLists) {
  EXPECT_EQ(parse_reals("0..1:3"), (std::vector<double>{0.0, 0.5, 1.0}));
  const std::vector<double> five = parse_reals("0.1..0.9");
  ASSERT_EQ(five.size(), 5u);
  EXPECT_DOUBLE_EQ(five[2], 0.5);
  EXPECT_EQ(parse_reals("0.05,1"), (std::vector<double>{0.05, 1.0}));
  EXPECT_THROW(parse_reals("0.9..0.1"), Error);
  EXPECT_THROW(parse_reals("0..1:1"), Error);
  // fuzz_cli_arguments found these accepted as infinities: the span, or a multiple of it
  // before the division by the point count, overflows.
  EXPECT_THROW(parse_reals("-1e308..1e308"), Error);
  EXPECT_THROW(parse_reals("8..1e308"), Error);
  EXPECT_EQ(parse_reals("8..1e300:3").size(), 3u);
  EXPECT_THROW(parse_reals("x"), Error);
  EXPECT_THROW(parse_reals("nan"), Error);
}

TEST(ParseNames, RejectsEmptyNames) {
  EXPECT_EQ(parse_names("a,b"), (std::vector<std::string>{"a", "b"}));
  EXPECT_THROW(parse_names("a,,b"), Error);
  EXPECT_THROW(parse_names(""), Error);
}

}  // namespace
}  // namespace dsaf::cli
