// One size syntax for the whole command line (util/size.h).
#include <gtest/gtest.h>

#include "weft/util/error.h"
#include "weft/util/size.h"

using weft::parse_size;

TEST(Size, BinaryLettersDecimalBytesAndIecUnits) {
  EXPECT_EQ(parse_size("8", "x"), 8);
  EXPECT_EQ(parse_size("8B", "x"), 8);
  EXPECT_EQ(parse_size("64K", "x"), 65536);  // as nccl-tests reads it
  EXPECT_EQ(parse_size("64k", "x"), 65536);
  EXPECT_EQ(parse_size("1M", "x"), 1 << 20);
  EXPECT_EQ(parse_size("2G", "x"), std::int64_t{2} << 30);
  EXPECT_EQ(parse_size("1T", "x"), std::int64_t{1} << 40);
  EXPECT_EQ(parse_size("1MB", "x"), 1000000);
  EXPECT_EQ(parse_size("150KB", "x"), 150000);
  EXPECT_EQ(parse_size("1MiB", "x"), 1 << 20);
  EXPECT_EQ(parse_size("4KiB", "x"), 4096);
  EXPECT_EQ(parse_size("1.5K", "x"), 1536);
  EXPECT_EQ(parse_size("0", "x"), 0);
}

TEST(Size, MistakesAreOneLineErrorsNamingTheFlag) {
  for (const char* bad : {"", "X", "1X", "-1", "1.5", "0.3B", "nan", "inf", "1e30", " 8", "1KBB", "K"}) {
    try {
      parse_size(bad, "--max");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const weft::ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--max: ", 0), 0u) << e.what();
    }
  }
}

TEST(OneLine, EscapesControlBytes) {
  EXPECT_EQ(weft::one_line("plain text"), "plain text");
  EXPECT_EQ(weft::one_line("a\nb\r\tc"), "a\\nb\\r\\tc");
  EXPECT_EQ(weft::one_line(std::string("\x1b[31mred\x7f\x01", 10)), "\\x1b[31mred\\x7f\\x01");
  EXPECT_EQ(weft::one_line("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 stays
}
