#include "weft/parallel/elastic.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>

#include "weft/comm/auth.h"
#include "weft/util/env.h"
#include "weft/util/error.h"

namespace weft::parallel {

namespace {

volatile std::sig_atomic_t g_leave = 0;
void on_leave_signal(int) { g_leave = 1; }

// Unique in the job: host name and process id.
std::string process_id() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  std::string id = host;
  for (char& ch : id)
    if (ch == ' ' || ch == ':') ch = '_';
  return (id.empty() ? "host" : id) + "-" + std::to_string(::getpid());
}

constexpr double kLookEvery = 0.1;       // s between rank 0's looks for joiners
constexpr double kGather = 5;            // s the job waits for all the ranks it asked for, to admit them at once
constexpr double kJoinTimeout = 3600;    // s a late process waits to be admitted (or for the job's end)
constexpr std::int64_t kMostBytes = std::int64_t{1} << 40;  // a state image larger is a fault

}  // namespace

std::unique_ptr<LiveMembership> LiveMembership::from_env() {
  const comm::ProcessInfo p = comm::process_info_from_env();
  return from_env(p.rank, p.world);
}

bool LiveMembership::in_live_job() { return comm::Membership::address_from_env().has_value(); }

std::unique_ptr<LiveMembership> LiveMembership::from_env(int launch_rank, int launch_world) {
  const auto address = comm::Membership::address_from_env();
  if (!address) return nullptr;
  const bool joiner = env_string("WEFT_ELASTIC_JOIN").value_or("0") == "1";
  std::unique_ptr<LiveMembership> live(
      new LiveMembership(*address, comm::job_token_from_env(), process_id(), joiner, launch_rank, launch_world));
  struct sigaction sa {};
  sa.sa_handler = on_leave_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  return live;
}

LiveMembership::LiveMembership(const std::string& address, const std::string& token, std::string id, bool joiner,
                               int rank, int world)
    : membership_(address, token, std::move(id), comm::CommOptions::from_env().rendezvous_timeout_s),
      joiner_(joiner),
      launch_rank_(rank),
      launch_world_(world) {}

std::optional<comm::Generation> LiveMembership::enter(const std::string& what) {
  what_ = what;
  if (!joiner_) {
    generation_ = membership_.start(launch_rank_, launch_world_, what);
    return generation_;
  }
  auto g = membership_.join(kJoinTimeout, what);
  if (g) generation_ = *g;
  return g;
}

std::shared_ptr<comm::Communicator> LiveMembership::connect(const comm::CommOptions& options) {
  return membership_.connect(generation_, options);
}

bool LiveMembership::leave_requested() { return g_leave != 0; }

void LiveMembership::schedule(std::int64_t step, int world, std::string why) {
  Target t{step, world, std::move(why)};
  auto at = std::upper_bound(targets_.begin(), targets_.end(), step, [](std::int64_t s, const Target& x) { return s < x.step; });
  targets_.insert(at, std::move(t));
}

std::optional<std::string> LiveMembership::take_note() {
  auto n = std::move(note_);
  note_.reset();
  return n;
}

std::optional<MembershipChange> LiveMembership::poll(comm::Communicator& group, std::int64_t step) {
  // Each rank: [whether it asks to leave | rank 0: joiners waiting << 1, rank 0: the world to shrink to].
  std::int64_t mine[2] = {leave_requested() ? 1 : 0, 0};
  // Every rank keeps the schedule in step (whichever of them is rank 0 next acts on it).
  std::optional<Target> due;
  if (!targets_.empty() && targets_.front().step <= step) {
    due = targets_.front();
    targets_.erase(targets_.begin());
  }
  if (group.rank() == 0) {
    const auto now = std::chrono::steady_clock::now();
    if (due) {
      const Target& t = *due;
      if (t.world < group.size()) {
        mine[1] = t.world;
        note_ = "shrinking to " + std::to_string(t.world) + " rank(s) (" + t.why + ")";
      } else if (t.world > group.size()) {
        waiting_ = membership_.waiting(generation_);
        looked_ = now;
        const std::int64_t missing = t.world - group.size() - waiting_;
        if (missing > 0) {
          membership_.request(missing);
          expected_ = waiting_ + missing;
          expected_since_ = now;
        }
        note_ = "growing to " + std::to_string(t.world) + " ranks (" + t.why + "): asked the launchers for " +
                std::to_string(std::max<std::int64_t>(missing, 0)) + " more";
      }
    }
    if (std::chrono::duration<double>(now - looked_).count() >= kLookEvery) {
      waiting_ = membership_.waiting(generation_);
      looked_ = now;
    }
    // While the ranks asked for are still starting, the ones already waiting wait for them.
    const bool gathering = expected_ > 0 && waiting_ < expected_ &&
                           std::chrono::duration<double>(now - expected_since_).count() < kGather;
    if (!gathering) mine[0] |= waiting_ << 1;
  }
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(group.size()));
  group.allgather(mine, all.data(), 2, comm::DataType::kI64)->wait();
  const std::int64_t shrink_to = all[1];
  MembershipChange change;
  // To shrink, the last ranks before the ones kept last (servers) leave.
  const int kept_from = group.size() - keep_last_;
  for (int r = 0; r < group.size(); ++r)
    if ((all[2 * static_cast<std::size_t>(r)] & 1) || (shrink_to > 0 && r >= shrink_to - keep_last_ && r < kept_from))
      change.leaving.push_back(r);
  change.joining = all[0] >> 1;
  if (change.leaving.empty() && change.joining == 0) return std::nullopt;
  return change;
}

const comm::Generation& LiveMembership::advance(const MembershipChange& change) {
  const std::int64_t admitted_before = generation_.admitted;
  generation_ = generation_.rank == 0 ? membership_.propose(generation_, change.leaving, keep_last_)
                                      : membership_.follow(generation_);
  expected_ = std::max<std::int64_t>(0, expected_ - (generation_.admitted - admitted_before));
  waiting_ = 0;
  return generation_;
}

std::optional<comm::Generation> LiveMembership::recover(std::int64_t step) {
  constexpr double kSettle = 0.5;  // s without a new survivor before the next generation forms (one later joins again)
  generation_ = membership_.recover(generation_, step, kSettle);
  waiting_ = 0;
  if (generation_.rank >= 0) return generation_;
  auto g = membership_.join(kJoinTimeout, what_);  // too late for it: it joins again
  if (g) generation_ = *g;
  return g;
}

std::string hand_over(comm::Communicator& group, std::string bytes, int from, int to) {
  if (from == to) return group.rank() == to ? std::move(bytes) : std::string();
  if (group.rank() == from) {
    const auto n = static_cast<std::int64_t>(bytes.size());
    group.send(&n, 1, comm::DataType::kI64, to);
    group.send(bytes.data(), n, comm::DataType::kU8, to);
    return {};
  }
  if (group.rank() != to) return {};
  std::int64_t n = 0;
  group.recv(&n, 1, comm::DataType::kI64, from);
  if (n < 0 || n > kMostBytes) throw CommError("state hand-over: " + std::to_string(n) + " bytes announced");
  std::string received(static_cast<std::size_t>(n), '\0');
  group.recv(received.data(), n, comm::DataType::kU8, from);
  return received;
}

std::string share_state(comm::Communicator& group, std::string bytes) {
  std::int64_t n = static_cast<std::int64_t>(bytes.size());
  group.broadcast(&n, 1, comm::DataType::kI64, 0)->wait();
  if (n < 0 || n > kMostBytes) throw CommError("state hand-over: " + std::to_string(n) + " bytes announced");
  bytes.resize(static_cast<std::size_t>(n));
  group.broadcast(bytes.data(), n, comm::DataType::kU8, 0)->wait();
  return bytes;
}

}  // namespace weft::parallel
