// A command's flags declared once (util/flag_table.h), and the environment's table
// (util/environment.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "weft/util/env.h"
#include "weft/util/environment.h"
#include "weft/util/error.h"
#include "weft/util/flag_table.h"

using namespace weft;

namespace {
struct Options {
  std::int64_t count = 4;
  double rate = 0.5;
  std::string mode = "fast";
  std::optional<double> scale;
  bool loud = false;
};
#define AT(member) [](Options& o) -> FieldRef { return &o.member; }
FlagTable<Options> table() {
  FlagTable<Options> t;
  t.push_back(Flag<Options>("--count", AT(count), "how many").in(1, 64));
  t.push_back(Flag<Options>("--rate", AT(rate), "how fast").in_open(0, 1));
  t.push_back(Flag<Options>("--mode", AT(mode), "which way").one_of({"fast", "slow|careful"}).also_named({"-m"}));
  t.push_back(Flag<Options>("--scale", AT(scale), "how big").defaults("the data's").above(0));
  t.push_back(Flag<Options>("--loud", AT(loud), "say more").only_for([](const Options& o) { return o.mode == "slow|careful"; },
                                                                     "--mode slow|careful",
                                                                     [](const Options& o) { return "--mode " + o.mode; }));
  return t;
}
#undef AT
}  // namespace

TEST(FlagTable, ValuesAreCheckedAgainstBoundsAndChoicesInOneForm) {
  const auto t = table();
  EXPECT_EQ(value_error(t[0], "0"), "must be in [1, 64], got 0");
  EXPECT_EQ(value_error(t[0], "64"), "");
  EXPECT_EQ(value_error(t[0], "many"), "");  // not a number: the parser's to refuse
  EXPECT_EQ(value_error(t[1], "1"), "must be in [0, 1), got 1");
  EXPECT_EQ(value_error(t[1], "nan"), "must be a finite number, got nan");
  EXPECT_EQ(value_error(t[2], "medium"), "unknown value 'medium' (known: fast, slow|careful)");
  EXPECT_EQ(value_error(t[3], "0"), "must be above 0, got 0");
  EXPECT_EQ(value_error(t[3], "inf"), "must be a finite number, got inf");
}

TEST(FlagTable, LibraryOptionsAreCheckedButInitialValuesMeanTheDefault) {
  const auto t = table();
  Options o;
  EXPECT_NO_THROW(check_values(t, o));
  o.scale = 2;
  EXPECT_NO_THROW(check_values(t, o));
  o.scale = -1;
  EXPECT_THROW(check_values(t, o), ConfigError);
  o = Options{};
  o.rate = 1.5;
  try {
    check_values(t, o);
    ADD_FAILURE() << "--rate 1.5 taken";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--rate: must be in [0, 1), got 1.5");
  }
}

TEST(FlagTable, FlagsForSomeRunsAreRefusedByOthersNamingBoth) {
  const auto t = table();
  Options o;
  EXPECT_FALSE(flag_applies(t, "--loud", o));
  EXPECT_TRUE(flag_applies(t, "--count", o));
  EXPECT_TRUE(flag_applies(t, "--not-in-the-table", o));
  try {
    check_flags_apply(t, {"--count", "--loud"}, o);
    ADD_FAILURE() << "--loud taken";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--loud does not apply to this run: it is for --mode slow|careful, and the run has --mode fast");
  }
  o.mode = "slow|careful";
  EXPECT_NO_THROW(check_flags_apply(t, {"--loud"}, o));
}

TEST(FlagTable, TheDocsTableShowsEveryFlagWithItsDefaultAndFacts) {
  const std::string md = flags_markdown(table(), "");
  EXPECT_NE(md.find("| `--count` | 4 | how many (in [1, 64]) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `--mode`, `-m` | fast | which way (fast \\| slow\\|careful) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `--scale` | the data's | how big (above 0) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `--loud` | off | say more (only for --mode slow\\|careful) |"), std::string::npos) << md;
  EXPECT_EQ(help_line(table()[3]), "how big (above 0; default: the data's)");
}

TEST(Environment, EveryWeftVariableReadIsDeclared) {
  ::setenv("WEFT_SPIN_US", "5", 1);
  EXPECT_EQ(env_string("WEFT_SPIN_US"), std::optional<std::string>("5"));
  ::unsetenv("WEFT_SPIN_US");
  EXPECT_THROW(env_string("WEFT_NOT_DECLARED"), InternalError);
  EXPECT_NO_THROW(env_string("HOME"));  // others' variables are not weft's to declare
  std::set<std::string> names;
  for (const EnvVariable& v : environment_variables()) {
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " twice";
    EXPECT_EQ(find_environment_variable(v.name), &v);
  }
  EXPECT_NE(environment_markdown("communication").find("| `WEFT_TRANSPORT` | auto \\| shm \\| tcp \\| mpi |"),
            std::string::npos);
}
