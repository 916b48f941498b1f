// The store and the handshake in one process: operations, timeouts, wrong tokens and
// hostile bytes.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include "../process_threads.h"
#include "weft/comm/auth.h"
#include "weft/comm/frame_mac.h"
#include "weft/comm/process.h"
#include "weft/comm/socket.h"
#include "weft/comm/store.h"
#include "weft/util/error.h"

using namespace weft;
using namespace weft::comm;
using weft::testing::threads_of_this_process;

namespace {
const std::string kToken = "0123456789abcdef0123456789abcdef";
}

TEST(Store, SetGetAddWait) {
  StoreServer server("127.0.0.1", 0, kToken);
  StoreClient a("127.0.0.1", server.port(), kToken, 0, 5.0);
  StoreClient b("127.0.0.1", server.port(), kToken, 1, 5.0);
  a.set("k", std::string("v\0w", 3));
  EXPECT_EQ(*b.get("k", 1.0), std::string("v\0w", 3));
  EXPECT_FALSE(b.get("missing", 0.2).has_value());
  EXPECT_EQ(a.add("n", 5), 5);
  EXPECT_EQ(b.add("n", -2), 3);
  EXPECT_TRUE(a.check("n"));
  a.erase("n");
  EXPECT_FALSE(a.check("n"));
  // get() waits for a key another client sets later.
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    a.set("late", "x");
  });
  EXPECT_EQ(*b.get("late", 5.0), "x");
  later.join();
  auto missing = b.wait_all({"k", "late", "r3", "r5"}, 0.3);
  EXPECT_EQ(missing, (std::vector<std::string>{"r3", "r5"}));
  EXPECT_EQ(server.refused(), 0);
}

TEST(Store, RefusesAnotherJobsToken) {
  StoreServer server("127.0.0.1", 0, kToken);
  try {
    StoreClient c("127.0.0.1", server.port(), "fedcba9876543210fedcba9876543210", 0, 5.0);
    FAIL() << "a client with another token was accepted";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos) << e.what();
  }
  for (int i = 0; i < 50 && server.refused() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server.refused(), 1);
  // The store still serves its own job.
  StoreClient ok("127.0.0.1", server.port(), kToken, 0, 5.0);
  ok.set("a", "b");
  EXPECT_EQ(*ok.get("a", 1.0), "b");
}

TEST(Store, SurvivesRandomBytes) {
  StoreServer server("127.0.0.1", 0, kToken);
  std::mt19937 gen(1);
  for (int i = 0; i < 100; ++i) {
    Socket s = connect_tcp("127.0.0.1", server.port(), Deadline::in(2.0));
    std::string junk(1 + gen() % 3000, '\0');
    for (auto& ch : junk) ch = static_cast<char>(gen());
    try {
      write_all(s.fd(), junk.data(), junk.size(), Deadline::in(2.0));
    } catch (const CommError&) {
    }
  }
  StoreClient ok("127.0.0.1", server.port(), kToken, 0, 5.0);
  ok.set("still", "alive");
  EXPECT_EQ(*ok.get("still", 1.0), "alive");
}

// After the handshake every frame carries a tag under the connection's key: an altered,
// replayed or reordered frame fails, and the store drops a connection that sends one.
TEST(FrameMac, AlteredReplayedOrReorderedFramesFail) {
  const Digest key = session_key(kToken, Purpose::kStore, std::string(32, 'a'), std::string(32, 'c'));
  FrameMac client(key, true), server(key, false);
  const std::string f1 = std::string("\x05\x00\x00\x00\x01", 5) + "abcd", f2 = std::string("\x05\x00\x00\x00\x01", 5) + "wxyz";
  const std::string t1 = client.seal(f1), t2 = client.seal(f2);
  FrameMac replay = server;
  EXPECT_TRUE(server.check(f1, reinterpret_cast<const std::uint8_t*>(t1.data())));
  EXPECT_FALSE(server.check(f1, reinterpret_cast<const std::uint8_t*>(t1.data())));  // replayed
  FrameMac reorder(key, false);
  EXPECT_FALSE(reorder.check(f2, reinterpret_cast<const std::uint8_t*>(t2.data())));  // second first
  std::string altered = f1;
  altered[6] ^= 1;
  EXPECT_FALSE(replay.check(altered, reinterpret_cast<const std::uint8_t*>(t1.data())));
  // Another connection's key (other nonces) gives other tags.
  FrameMac other(session_key(kToken, Purpose::kStore, std::string(32, 'b'), std::string(32, 'c')), false);
  EXPECT_FALSE(other.check(f1, reinterpret_cast<const std::uint8_t*>(t1.data())));
}

TEST(Store, DropsAConnectionWhoseFrameFailsItsCheck) {
  StoreServer server("127.0.0.1", 0, kToken);
  Socket s = connect_tcp("127.0.0.1", server.port(), Deadline::in(2.0));
  Digest session{};
  connect_handshake(s.fd(), kToken, Purpose::kStore, 0, 5.0, &session);
  FrameMac mac(session, true);
  // A set request ("k" = "v") whose tag was computed for other bytes.
  const std::string f = std::string("\x07\x00\x00\x00\x01\x01\x00\x00\x00", 9) + "kv";
  const std::string tag = mac.seal(f + "x");
  const std::string out = f + tag;
  write_all(s.fd(), out.data(), out.size(), Deadline::in(2.0));
  char byte;
  EXPECT_THROW(read_exact(s.fd(), &byte, 1, Deadline::in(5.0)), CommError);  // closed, no reply
  StoreClient ok("127.0.0.1", server.port(), kToken, 0, 5.0);
  EXPECT_FALSE(ok.check("k"));  // the request was not carried out
}

namespace {
void wait_until(const std::function<bool()>& done, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}
}  // namespace

// Strangers cost their slots only: half-open connections (connected, never answering the
// handshake) beyond the bound drop the oldest, time out, start no thread, and the job's own
// clients are served meanwhile.
TEST(Store, HalfOpenConnectionsCostOnlyTheirSlots) {
  StoreServer server("127.0.0.1", 0, kToken, StoreLimits{64, 1.0});
  const int threads = threads_of_this_process();
  std::vector<Socket> strangers;
  for (int i = 0; i < 300; ++i) strangers.push_back(connect_tcp("127.0.0.1", server.port(), Deadline::in(5.0)));
  wait_until([&] { return server.refused() >= 300 - 64; }, 5.0);
  EXPECT_GE(server.refused(), 300 - 64);
  EXPECT_LE(server.connections(), 64);
  EXPECT_EQ(threads_of_this_process(), threads);  // no thread per connection
  const auto t0 = std::chrono::steady_clock::now();
  StoreClient ok("127.0.0.1", server.port(), kToken, 0, 5.0);
  ok.set("k", "v");
  EXPECT_EQ(*ok.get("k", 1.0), "v");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  // The strangers that were still waiting run out of time; the job's client stays.
  wait_until([&] { return server.connections() == 1; }, 5.0);
  EXPECT_EQ(server.connections(), 1);
  EXPECT_EQ(server.refused(), 300);
  EXPECT_EQ(*ok.get("k", 1.0), "v");
}

TEST(Store, ConnectThenCloseCyclesLeaveNothingBehind) {
  StoreServer server("127.0.0.1", 0, kToken);
  const int threads = threads_of_this_process();
  for (int i = 0; i < 5000; ++i) Socket s = connect_tcp("127.0.0.1", server.port(), Deadline::in(5.0));
  wait_until([&] { return server.connections() == 0; }, 5.0);
  EXPECT_EQ(server.connections(), 0);
  EXPECT_EQ(threads_of_this_process(), threads);
  StoreClient ok("127.0.0.1", server.port(), kToken, 0, 5.0);
  EXPECT_EQ(ok.add("n", 2), 2);
}

// With its descriptors exhausted (a store in a child process limited to 128), the store
// drops the oldest stranger to make room instead of failing, and its job's client gets in.
TEST(Store, SurvivesRunningOutOfDescriptors) {
  int port_pipe[2];
  ASSERT_EQ(::pipe(port_pipe), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    rlimit few{128, 128};
    ::setrlimit(RLIMIT_NOFILE, &few);
    StoreServer server("127.0.0.1", 0, kToken, StoreLimits{100000, 30.0});
    const int port = server.port();
    [[maybe_unused]] ssize_t n = ::write(port_pipe[1], &port, sizeof port);
    ::pause();
    ::_exit(0);
  }
  int port = 0;
  ASSERT_EQ(::read(port_pipe[0], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  std::vector<Socket> strangers;
  for (int i = 0; i < 400; ++i) strangers.push_back(connect_tcp("127.0.0.1", port, Deadline::in(5.0)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  bool served = false;
  try {
    StoreClient ok("127.0.0.1", port, kToken, 0, 10.0);
    ok.set("k", "v");
    served = ok.get("k", 1.0) == std::optional<std::string>("v");
  } catch (const CommError& e) {
    ADD_FAILURE() << e.what();
  }
  EXPECT_TRUE(served);
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, WNOHANG), 0) << "the store's process died";
  ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  ::close(port_pipe[0]);
  ::close(port_pipe[1]);
}

TEST(Handshake, MutualAndBounded) {
  int port = 0;
  Socket listener = listen_tcp("127.0.0.1", 0, &port);
  std::uint32_t seen = 0;
  std::thread acceptor([&] {
    Socket s = accept_tcp(listener.fd(), Deadline::in(5.0));
    seen = accept_handshake(s.fd(), kToken, Purpose::kPeer, 7, 5.0);
  });
  Socket c = connect_tcp("127.0.0.1", port, Deadline::in(5.0));
  EXPECT_EQ(connect_handshake(c.fd(), kToken, Purpose::kPeer, 3, 5.0), 7u);
  acceptor.join();
  EXPECT_EQ(seen, 3u);
  // A peer that says nothing: the handshake times out instead of hanging.
  std::thread silent([&] {
    Socket s = connect_tcp("127.0.0.1", port, Deadline::in(5.0));
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
  });
  Socket s = accept_tcp(listener.fd(), Deadline::in(5.0));
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(accept_handshake(s.fd(), kToken, Purpose::kPeer, 7, 0.3), CommError);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  silent.join();
}

// Peers' handshakes side by side: connections that stay silent, or send another job's
// token, do not hold up the peers that follow them (one at a time, each silent one would
// cost its whole 10 s handshake time and the 3 s deadline here would pass).
TEST(Handshake, SilentConnectionsDoNotDelayPeers) {
  int port = 0;
  Socket listener = listen_tcp("127.0.0.1", 0, &port);
  std::vector<Socket> silent;
  for (int i = 0; i < 20; ++i) silent.push_back(connect_tcp("127.0.0.1", port, Deadline::in(5.0)));
  std::vector<std::thread> peers;
  for (std::uint32_t id : {5u, 6u, 9u}) {  // 9: not wanted
    peers.emplace_back([port, id] {
      try {
        Socket c = connect_tcp("127.0.0.1", port, Deadline::in(5.0));
        connect_handshake(c.fd(), kToken, Purpose::kPeer, id, 5.0);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      } catch (const CommError&) {
      }
    });
  }
  peers.emplace_back([port] {
    try {
      Socket c = connect_tcp("127.0.0.1", port, Deadline::in(5.0));
      connect_handshake(c.fd(), "another-job-token-0123456789abcdef", Purpose::kPeer, 5, 5.0);
    } catch (const CommError&) {
    }
  });
  std::vector<AcceptedPeer> got;
  EXPECT_NO_THROW(got = accept_authenticated(listener.fd(), kToken, Purpose::kPeer, 1, 2,
                                             [](std::uint32_t who) { return who == 5 || who == 6; }, 3.0, 10.0, "test"));
  for (auto& t : peers) t.join();
  std::vector<std::uint32_t> ids;
  for (const AcceptedPeer& a : got) {
    ids.push_back(a.identity);
    ::close(a.fd);
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::uint32_t>{5, 6}));
  // Nobody comes: the deadline, not a hang.
  EXPECT_THROW(accept_authenticated(listener.fd(), kToken, Purpose::kPeer, 1, 1, [](std::uint32_t) { return true; }, 0.3,
                                    10.0, "test"),
               CommError);
}

TEST(Auth, HmacKnownAnswer) {
  // RFC 4231 test case 2.
  Digest d = hmac_sha256("Jefe", "what do ya want for nothing?");
  const unsigned char want[32] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24,
                                  0x26, 0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27,
                                  0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
  EXPECT_EQ(0, std::memcmp(d.data(), want, 32));
  EXPECT_EQ(generate_token().size(), 64u);
  EXPECT_NEAR(token_strength_bits(generate_token()), 256, 40);  // 64 hex digits (fewer than 16 distinct: rarely)
  EXPECT_GE(token_strength_bits("0123456789abcdef0123456789abcdef"), kMinTokenBits);
  EXPECT_LT(token_strength_bits("weft-weft-weft-weft"), kMinTokenBits);  // 19 chars of 5 distinct
  EXPECT_EQ(token_strength_bits("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), 0);
  EXPECT_LT(token_strength_bits("password12345678"), kMinTokenBits);
  EXPECT_NE(generate_token(), generate_token());
}

TEST(ProcessInfo, SlurmHostLists) {
  EXPECT_EQ(first_slurm_host("node[03-05,9],gpu1"), "node03");
  EXPECT_EQ(first_slurm_host("gpu7,gpu8"), "gpu7");
  EXPECT_EQ(first_slurm_host("a[1]"), "a1");
}
