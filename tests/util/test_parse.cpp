// The one reader of lists, ranges and pairs (util/parse.h).
#include <gtest/gtest.h>

#include "weft/util/parse.h"
#include "weft/util/spelling.h"

using namespace weft;

TEST(Parse, ListsKeepEmptyItemsForTheirParserToRefuse) {
  EXPECT_EQ(*split_list("a,b,c", ','), (std::vector<std::string_view>{"a", "b", "c"}));
  EXPECT_EQ(*split_list("a,", ','), (std::vector<std::string_view>{"a", ""}));
  EXPECT_EQ(*split_list("", ','), (std::vector<std::string_view>{""}));
  EXPECT_FALSE(split_list("1,2,3", ',', 2));
  EXPECT_EQ(*parse_number_list("2:1.5", ':'), (std::vector<double>{2, 1.5}));
  EXPECT_FALSE(parse_number_list("2::1", ':'));
  EXPECT_FALSE(parse_number_list("2:x", ':'));
  EXPECT_FALSE(parse_number_list("", ':'));
  EXPECT_FALSE(parse_number_list("1:inf", ':'));
  EXPECT_EQ(*parse_integer_list("0,3,-2", ','), (std::vector<std::int64_t>{0, 3, -2}));
  EXPECT_FALSE(parse_integer_list("1,2.5", ','));
  EXPECT_FALSE(parse_integer_list("99999999999999999999", ','));
}

TEST(Parse, PairsSplitAtTheFirstSeparator) {
  EXPECT_EQ(*parse_integer_pair("2:8"), (std::pair<std::int64_t, std::int64_t>{2, 8}));
  EXPECT_FALSE(parse_integer_pair("28"));
  EXPECT_FALSE(parse_integer_pair("2:8:1"));
  EXPECT_FALSE(parse_integer_pair(":8"));
  EXPECT_FALSE(parse_integer_pair("2:"));
  const auto p = *split_pair("a:b:c");
  EXPECT_EQ(p.first, "a");
  EXPECT_EQ(p.second, "b:c");
}

TEST(Spelling, NearestFlagWithinAThirdOfTheWord) {
  EXPECT_EQ(weft::edit_distance("", "abc"), 3u);
  EXPECT_EQ(weft::edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(weft::edit_distance("--lr", "--rl"), 1u);  // a swap of neighbours counts 1
  const std::vector<std::string> flags = {"--lr", "--layers", "--max-steps", "--momentum"};
  EXPECT_EQ(weft::closest_spelling("--lrr", flags), "--lr");
  EXPECT_EQ(weft::closest_spelling("--max-step", flags), "--max-steps");
  EXPECT_EQ(weft::closest_spelling("--momentun", flags), "--momentum");
  EXPECT_EQ(weft::closest_spelling("--batch-size", flags), std::nullopt);  // nothing near
  EXPECT_EQ(weft::closest_spelling("--x", {}), std::nullopt);
}
