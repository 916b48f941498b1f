#include "weft/comm/membership.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "weft/util/env.h"
#include "weft/util/error.h"
#include "weft/util/parse.h"

namespace weft::comm {

namespace {

const std::string kPrefix = "live/";

std::string generation_key(std::int64_t number) { return kPrefix + "g" + std::to_string(number); }

}  // namespace

std::pair<std::string, int> parse_host_port(const std::string& text, const std::string& what) {
  const auto colon = text.rfind(':');
  const auto port = colon == std::string::npos ? std::nullopt : parse_integer(text.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535 || colon == 0) throw ConfigError(what + " '" + text + "' is not HOST:PORT");
  return {text.substr(0, colon), static_cast<int>(*port)};
}

std::string generation_record(const Generation& g) {
  std::string r = "admitted " + std::to_string(g.admitted) + ":";
  for (const std::string& id : g.members) r += " " + id;
  return r;
}

Generation parse_generation(std::int64_t number, const std::string& record, const std::string& self) {
  Generation g;
  g.number = number;
  std::istringstream in(record);
  std::string word, count;
  in >> word >> count;
  std::int64_t admitted = -1;
  if (count.size() > 1 && count.back() == ':') admitted = parse_integer(count.substr(0, count.size() - 1)).value_or(-1);
  if (word != "admitted" || admitted < 0)
    throw CommError("live membership: generation " + std::to_string(number) + " is malformed ('" + record.substr(0, 64) + "')");
  g.admitted = admitted;
  for (std::string id; in >> id;) {
    if (id == self) g.rank = g.size();
    g.members.push_back(id);
  }
  if (g.members.empty()) throw CommError("live membership: generation " + std::to_string(number) + " has no members");
  return g;
}

Membership::Membership(const std::string& address, const std::string& token, std::string id, double timeout_s)
    : token_(token), id_(std::move(id)), timeout_s_(timeout_s) {
  const auto [host, port] = parse_host_port(address, "WEFT_ELASTIC_STORE");
  host_ = host;
  store_ = std::make_shared<StoreClient>(host, port, token, 0, timeout_s);
}

std::optional<std::string> Membership::address_from_env() {
  auto a = env_string("WEFT_ELASTIC_STORE");
  if (a && a->empty()) a.reset();
  if (a) parse_host_port(*a, "WEFT_ELASTIC_STORE");
  return a;
}

Generation Membership::start(int rank, int world, const std::string& what) {
  if (rank == 0) store_->set(kPrefix + "what", what);
  store_->set(kPrefix + "g0/" + std::to_string(rank), id_);
  std::string record;
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(kPrefix + "g0/" + std::to_string(r));
    if (const auto missing = store_->wait_all(keys, timeout_s_); !missing.empty())
      throw CommError("live membership: " + std::to_string(missing.size()) + " launched rank(s) never arrived");
    Generation g;
    for (const std::string& k : keys) g.members.push_back(*store_->get(k, timeout_s_));
    record = generation_record(g);
    store_->set(generation_key(0), record);
  } else {
    auto r = store_->get(generation_key(0), timeout_s_);
    if (!r) throw CommError("live membership: rank 0 did not form the first generation in time");
    record = *r;
  }
  Generation g = parse_generation(0, record, id_);
  if (g.rank != rank || g.size() != world)
    throw CommError("live membership: the first generation does not hold this process at rank " + std::to_string(rank));
  return g;
}

std::optional<Generation> Membership::join(double timeout_s, const std::string& what) {
  const auto job = store_->get(kPrefix + "what", timeout_s_);
  if (!job) throw CommError("live membership: the job did not say what it trains");
  if (*job != what)
    throw ConfigError("the job trains " + *job + "; this process would train " + what + ": join a live job with its own command");
  const std::int64_t ticket = store_->add(kPrefix + "joins", 1) - 1;
  store_->set(kPrefix + "join/" + std::to_string(ticket), id_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::int64_t number = store_->add(kPrefix + "latest", 0);
  while (std::chrono::steady_clock::now() < deadline) {
    if (store_->check(kPrefix + "done")) return std::nullopt;
    const auto record = store_->get(generation_key(number), 0.5);
    if (!record) continue;
    Generation g = parse_generation(number, *record, id_);
    if (g.rank >= 0) return g;
    if (g.admitted > ticket) throw CommError("live membership: generation " + std::to_string(number) + " admitted this "
                                             "process's request without it");
    ++number;
  }
  throw CommError("live membership: not admitted within " + std::to_string(static_cast<int>(timeout_s)) + " s");
}

std::int64_t Membership::waiting(const Generation& g) { return store_->add(kPrefix + "joins", 0) - g.admitted; }

void Membership::request(std::int64_t count) { store_->add(kPrefix + "requested", count); }

Generation Membership::propose(const Generation& g, const std::vector<int>& leaving, int keep_last) {
  Generation next;
  next.number = g.number + 1;
  for (int r = 0; r < g.size(); ++r)
    if (std::find(leaving.begin(), leaving.end(), r) == leaving.end()) next.members.push_back(g.members[static_cast<std::size_t>(r)]);
  return parse_generation(next.number, publish(next, g.admitted, keep_last), id_);
}

std::string Membership::publish(Generation& next, std::int64_t admitted_before, int keep_last) {
  next.admitted = store_->add(kPrefix + "joins", 0);
  const auto stay = static_cast<std::ptrdiff_t>(next.members.size());
  const std::ptrdiff_t at = stay - std::clamp<std::ptrdiff_t>(keep_last, 0, stay);
  std::vector<std::string> joiners;
  for (std::int64_t k = admitted_before; k < next.admitted; ++k) {
    auto id = store_->get(kPrefix + "join/" + std::to_string(k), timeout_s_);
    if (!id) throw CommError("live membership: join request " + std::to_string(k) + " has no id");
    joiners.push_back(*id);
  }
  next.members.insert(next.members.begin() + at, joiners.begin(), joiners.end());
  const std::string record = generation_record(next);
  store_->set(generation_key(next.number), record);
  store_->add(kPrefix + "latest", 1);
  return record;
}

Generation Membership::follow(const Generation& g) {
  auto record = store_->get(generation_key(g.number + 1), timeout_s_);
  if (!record) throw CommError("live membership: rank 0 did not publish generation " + std::to_string(g.number + 1));
  return parse_generation(g.number + 1, *record, id_);
}

Generation Membership::recover(const Generation& g, std::int64_t step, double settle_s) {
  const std::string base = generation_key(g.number) + "/alive";
  const std::string next_key = generation_key(g.number + 1);
  store_->set(base + "/" + std::to_string(g.rank), std::to_string(step));
  std::int64_t seen = store_->add(base, 1);
  auto last = std::chrono::steady_clock::now();
  while (seen < g.size() && !store_->check(next_key)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::int64_t now = store_->add(base, 0);
    if (now != seen) {
      seen = now;
      last = std::chrono::steady_clock::now();
    } else if (std::chrono::duration<double>(std::chrono::steady_clock::now() - last).count() >= settle_s) {
      break;
    }
  }
  if (!store_->check(next_key) && store_->add(base + "/proposer", 1) == 1) {
    // The survivors as they stand now; the one with the most steps (the lowest rank of them) first.
    std::vector<std::pair<int, std::int64_t>> alive;
    for (int r = 0; r < g.size(); ++r) {
      const std::string key = base + "/" + std::to_string(r);
      if (!store_->check(key)) continue;
      const auto steps = parse_integer(store_->get(key, timeout_s_).value_or(""));
      if (!steps) throw CommError("live membership: survivor " + std::to_string(r) + "'s record is malformed");
      alive.emplace_back(r, *steps);
    }
    const auto first = std::max_element(alive.begin(), alive.end(), [](const auto& a, const auto& b) {
      return a.second < b.second || (a.second == b.second && a.first > b.first);
    });
    Generation next;
    next.number = g.number + 1;
    next.members.push_back(g.members[static_cast<std::size_t>(first->first)]);
    for (const auto& [r, steps] : alive)
      if (r != first->first) next.members.push_back(g.members[static_cast<std::size_t>(r)]);
    publish(next, g.admitted);
  }
  return follow(g);
}

std::shared_ptr<Communicator> Membership::connect(const Generation& g, const CommOptions& options) const {
  ProcessInfo info;
  info.rank = g.rank;
  info.world = g.size();
  info.master_addr = host_;
  info.launcher = "weft";
  return Communicator::init(info, options, store_, token_, "live-g" + std::to_string(g.number));
}

void Membership::finish() { store_->set(kPrefix + "done", "1"); }

}  // namespace weft::comm
