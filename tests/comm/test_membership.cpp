// The live membership of an elastic job (membership.h) in one process: generations formed,
// joined, left, the job's end seen by a waiting joiner, and malformed records refused.
#include <gtest/gtest.h>

#include <thread>

#include "weft/comm/membership.h"
#include "weft/comm/store.h"
#include "weft/util/error.h"

using namespace weft;
using namespace weft::comm;

namespace {
const std::string kMemberToken = "0123456789abcdef0123456789abcdef";
}

TEST(Membership, GenerationsGrowAndShrink) {
  StoreServer server("127.0.0.1", 0, kMemberToken);
  const std::string at = "127.0.0.1:" + std::to_string(server.port());
  Membership a(at, kMemberToken, "a", 5), b(at, kMemberToken, "b", 5), c(at, kMemberToken, "c", 5), d(at, kMemberToken, "d", 5);
  Generation gb;
  std::thread tb([&] { gb = b.start(1, 2, "mlp"); });
  const Generation g0 = a.start(0, 2, "mlp");
  tb.join();
  EXPECT_EQ(g0.members, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(g0.rank, 0);
  EXPECT_EQ(gb.rank, 1);
  EXPECT_EQ(a.waiting(g0), 0);

  // Two join; rank 0 sees them waiting and admits both after the members that stay.
  std::optional<Generation> gc, gd;
  std::thread tc([&] { gc = c.join(10, "mlp"); });
  while (a.waiting(g0) < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::thread td([&] { gd = d.join(10, "mlp"); });
  while (a.waiting(g0) < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const Generation g1 = a.propose(g0, {});
  const Generation g1b = b.follow(g0);
  tc.join();
  td.join();
  EXPECT_EQ(g1.number, 1);
  EXPECT_EQ(g1.size(), 4);
  EXPECT_EQ(g1.members[0], "a");
  EXPECT_EQ(g1.members[1], "b");
  EXPECT_EQ(g1.admitted, 2);
  EXPECT_EQ(g1b.rank, 1);
  ASSERT_TRUE(gc && gd);
  EXPECT_EQ(gc->number, 1);
  EXPECT_EQ(gc->rank + gd->rank, 5);  // ranks 2 and 3, in the order they asked
  EXPECT_EQ(a.waiting(g1), 0);

  // Rank 0 itself leaves: b becomes rank 0 of generation 2.
  const Generation g2 = a.propose(g1, {0, 2});
  const Generation g2b = b.follow(g1);
  EXPECT_EQ(g2.rank, -1);
  EXPECT_EQ(g2b.rank, 0);
  EXPECT_EQ(g2b.members, (std::vector<std::string>{"b", gc->rank == 2 ? "d" : "c"}));
}

TEST(Membership, AJoinerSeesTheJobEnd) {
  StoreServer server("127.0.0.1", 0, kMemberToken);
  const std::string at = "127.0.0.1:" + std::to_string(server.port());
  Membership a(at, kMemberToken, "a", 5), late(at, kMemberToken, "late", 5);
  a.start(0, 1, "mlp");
  std::optional<Generation> g = Generation{};
  std::thread t([&] { g = late.join(30, "mlp"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  a.finish();
  t.join();
  EXPECT_FALSE(g.has_value());
}

TEST(Membership, AJoinerOfAnotherJobIsRefusedBeforeItAsks) {
  StoreServer server("127.0.0.1", 0, kMemberToken);
  const std::string at = "127.0.0.1:" + std::to_string(server.port());
  Membership a(at, kMemberToken, "a", 5), other(at, kMemberToken, "other", 5);
  const Generation g0 = a.start(0, 1, "model mlp with sgd");
  try {
    other.join(5, "model cnn with sgd");
    FAIL() << "a joiner of another job was let in";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the job trains model mlp with sgd; this process would train model cnn"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(a.waiting(g0), 0);  // it never asked
}

TEST(Membership, MalformedRecordsAndAddresses) {
  EXPECT_THROW(parse_generation(3, "admitted x: a b", "a"), CommError);
  EXPECT_THROW(parse_generation(3, "admitted 2 a b", "a"), CommError);
  EXPECT_THROW(parse_generation(3, "admitted 2:", "a"), CommError);
  EXPECT_THROW(parse_generation(3, "members 2: a", "a"), CommError);
  EXPECT_THROW(parse_generation(3, "admitted -1: a", "a"), CommError);
  const Generation g = parse_generation(3, "admitted 4: x y z", "z");
  EXPECT_EQ(g.rank, 2);
  EXPECT_EQ(g.admitted, 4);
  EXPECT_EQ(generation_record(g), "admitted 4: x y z");
  EXPECT_THROW(Membership("nowhere", kMemberToken, "a", 1), ConfigError);
  EXPECT_THROW(Membership("host:0", kMemberToken, "a", 1), ConfigError);
  EXPECT_THROW(Membership(":80", kMemberToken, "a", 1), ConfigError);
}
