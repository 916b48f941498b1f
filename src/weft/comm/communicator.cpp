#include "weft/comm/communicator.h"

#include "weft/algo/collective_facts.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "weft/algo/registry.h"
#include "weft/comm/auth.h"
#include "weft/comm/channel.h"
#include "weft/comm/executor.h"
#include "weft/comm/mpi_transport.h"
#include "weft/comm/socket.h"
#include "weft/comm/store.h"
#include "weft/comm/trace.h"
#include "weft/util/env.h"

namespace weft::comm {

using algo::Collective;

// --- Work ---


void Work::finish(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mu_);
  finished_at_ = std::chrono::steady_clock::now();
  error_ = std::move(error);
  done_.store(true, std::memory_order_release);
  cv_.notify_all();
}

void Work::wait() {
  if (owner_ && !done_.load(std::memory_order_acquire)) owner_->drive(this);
  if (!done_.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_.load(); });
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

void Work::start() {
  if (owner_ && !done_.load(std::memory_order_acquire)) owner_->start(p2p_);
}

bool Work::test() {
  if (done_.load(std::memory_order_acquire)) return true;
  start();  // a polled operation must progress
  return done_.load(std::memory_order_acquire);
}

std::chrono::steady_clock::time_point Work::finished_at() {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_at_;
}

bool Work::failed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && error_ != nullptr;
}

// --- options ---

CommOptions CommOptions::from_env() {
  CommOptions o;
  auto seconds = [](const char* name, double dflt) {
    auto s = env_string(name);
    if (!s) return dflt;
    char* end = nullptr;
    double v = std::strtod(s->c_str(), &end);
    if (end == s->c_str() || *end != '\0' || !(v > 0)) {
      throw ConfigError(std::string(name) + "='" + *s + "' is not a positive number of seconds");
    }
    return v;
  };
  o.timeout_s = seconds("WEFT_COMM_TIMEOUT", o.timeout_s);
  o.rendezvous_timeout_s = seconds("WEFT_RENDEZVOUS_TIMEOUT", o.rendezvous_timeout_s);
  if (auto t = env_string("WEFT_TRANSPORT")) {
    if (*t != "auto" && *t != "shm" && *t != "tcp" && *t != "mpi") {
      throw ConfigError("WEFT_TRANSPORT='" + *t + "' is not one of auto, shm, tcp, mpi");
    }
    o.transport = *t;
  }
  if (auto r = env_int_in("WEFT_SHM_RING_BYTES", 4096, std::int64_t{1} << 30)) {
    o.shm_ring_bytes = static_cast<std::size_t>(*r);
  }
  if (auto d = env_string("WEFT_TRACE")) o.trace_dir = *d;
  return o;
}

// --- links of a group ---

struct GroupLinks {
  std::vector<PeerLink> peers;  // by group rank
  std::vector<std::unique_ptr<Channel>> channels;
  std::unique_ptr<ShmSegment> my_segment;
  std::vector<std::unique_ptr<ShmSegment>> peer_segments;
  Doorbell* bell = nullptr;
  std::vector<std::string> host_of;  // host id per group rank
  int local_world = 0;               // ranks per host when hosts hold equal contiguous blocks, else 0
  bool shares_core = false;          // the job's ranks on this host outnumber their cores
  int tcp = 0, shm = 0;
};

struct Communicator::Task {
  enum Kind { kCollective, kSend, kRecv } kind = kCollective;
  Collective collective = Collective::kAllReduce;
  std::string algorithm;
  const void* in = nullptr;
  void* out = nullptr;
  std::int64_t count = 0;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  int peer = -1;
  WorkPtr work = std::make_shared<Work>();
};

namespace {

// What identifies a host: its name and boot id. WEFT_HOST_ID overrides it (tests use it to
// pretend that ranks of one machine run on several hosts).
std::string host_id() {
  if (auto forced = env_string("WEFT_HOST_ID")) return "forced/" + *forced;
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return host_name() + "/" + boot;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

std::string join_ranks(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0; }

const char* env_name_for(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "WEFT_ALLREDUCE_ALGO";
    case Collective::kBroadcast: return "WEFT_BROADCAST_ALGO";
    case Collective::kReduce: return "WEFT_REDUCE_ALGO";
    case Collective::kGather: return "WEFT_GATHER_ALGO";
    case Collective::kScatter: return "WEFT_SCATTER_ALGO";
    case Collective::kAllGather: return "WEFT_ALLGATHER_ALGO";
    case Collective::kReduceScatter: return "WEFT_REDUCE_SCATTER_ALGO";
    case Collective::kAllToAll: return "WEFT_ALLTOALL_ALGO";
    case Collective::kBarrier: return "WEFT_BARRIER_ALGO";
  }
  return "";
}

}  // namespace

// --- construction ---

std::shared_ptr<Communicator> Communicator::init() { return init(process_info_from_env(), CommOptions::from_env()); }

std::shared_ptr<Communicator> Communicator::init(const ProcessInfo& info, const CommOptions& options) {
  std::shared_ptr<Communicator> c(new Communicator());
  c->info_ = info;
  c->options_ = options;
  if (options.transport == "mpi") {
    // MPI launched the processes and connects them: no store, no token.
    if (info.launcher == "weft" || info.launcher == "slurm") {
      throw ConfigError("WEFT_TRANSPORT=mpi needs the processes started by mpirun, not by " +
                        std::string(info.launcher == "weft" ? "weft launch" : "Slurm without mpirun"));
    }
    int rank = 0, world = 1;
    mpi::init(&rank, &world);
    if (info.launcher != "none" && (info.rank != rank || info.world != world)) {
      throw ConfigError("MPI says rank " + std::to_string(rank) + " of " + std::to_string(world) +
                        ", the environment says " + std::to_string(info.rank) + " of " + std::to_string(info.world));
    }
    c->rank_ = rank;
    c->members_.resize(static_cast<size_t>(world));
    for (int i = 0; i < world; ++i) c->members_[i] = i;
    c->links_ = std::make_unique<GroupLinks>();
    // mpirun places ranks by host in blocks of the local size (its default mapping).
    if (info.local_world > 0 && world % info.local_world == 0) c->links_->local_world = info.local_world;
    c->mpi_group_ = mpi::world_group();
    if (!options.trace_dir.empty()) c->tracer_ = std::make_shared<Tracer>(options.trace_dir, rank);
    c->thread_ = std::thread([p = c.get()] { p->worker(); });
    c->healthy_ = true;
    return c;
  }
  // A job of one process needs no shared secret: it makes its own.
  c->token_ = info.world == 1 && !env_string("WEFT_JOB_TOKEN") ? generate_token() : job_token_from_env();
  c->rank_ = info.rank;
  c->members_.resize(static_cast<size_t>(info.world));
  for (int i = 0; i < info.world; ++i) c->members_[i] = i;
  // A job of one process that nobody launched talks only to itself: its store takes any free
  // port, so that several such jobs (and tests) can run side by side.
  const bool alone = info.world == 1 && info.launcher == "none" && !env_string("MASTER_PORT");
  int port = info.master_port;
  if (info.rank == 0) {
    c->server_ = std::make_shared<StoreServer>(is_loopback(info.master_addr) || alone ? "127.0.0.1" : "0.0.0.0",
                                               alone ? 0 : port, c->token_);
    if (alone) port = c->server_->port();
  }
  c->store_ = std::make_shared<StoreClient>(alone ? "127.0.0.1" : info.master_addr, port, c->token_,
                                            static_cast<std::uint32_t>(info.rank), options.rendezvous_timeout_s);
  if (info.rank == 0) {
    c->session_ = generate_token().substr(0, 12);
    c->store_->set("session", c->session_);
  } else {
    auto s = c->store_->get("session", options.rendezvous_timeout_s);
    if (!s) throw CommError("rendezvous: rank 0 did not start the job within the timeout");
    c->session_ = *s;
  }
  if (!options.trace_dir.empty()) c->tracer_ = std::make_shared<Tracer>(options.trace_dir, info.rank);
  c->connect_group("world");
  c->thread_ = std::thread([p = c.get()] { p->worker(); });
  c->healthy_ = true;
  return c;
}

std::shared_ptr<Communicator> Communicator::new_group(const std::vector<int>& ranks) {
  std::vector<int> global;
  int my = -1;
  for (int r : ranks) {
    if (r < 0 || r >= size()) throw ConfigError("new_group: rank " + std::to_string(r) + " is outside the group");
    if (std::find(global.begin(), global.end(), members_[r]) != global.end()) {
      throw ConfigError("new_group: rank " + std::to_string(r) + " is listed twice");
    }
    if (r == rank_) my = static_cast<int>(global.size());
    global.push_back(members_[r]);
  }
  if (my < 0) throw ConfigError("new_group: this rank (" + std::to_string(rank_) + ") is not a member");
  std::string key = name_ + ":" + join_ranks(global);
  int nth = groups_made_[key]++;
  std::shared_ptr<Communicator> c(new Communicator());
  c->info_ = info_;
  c->options_ = options_;
  c->token_ = token_;
  c->session_ = session_;
  c->store_ = store_;
  c->tracer_ = tracer_;
  c->rank_ = my;
  c->members_ = global;
  std::string compact = key;
  std::replace(compact.begin(), compact.end(), ' ', '_');
  c->name_ = "group[" + join_ranks(global) + "]" + (nth ? "#" + std::to_string(nth) : "");
  if (mpi_group_) {
    c->links_ = std::make_unique<GroupLinks>();
    c->mpi_group_ = mpi::make_group(*mpi_group_, ranks);
  } else {
    c->connect_group("g-" + compact + "-" + std::to_string(nth));
    c->links_->shares_core = links_->shares_core;
  }
  c->thread_ = std::thread([p = c.get()] { p->worker(); });
  return c;
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Rank 0 serves the store: it stays until every rank has left, since others may still
  // need the store (to form groups, say) after rank 0 is done.
  if (name_ == "world" && store_ && healthy_) {
    try {
      store_->add(session_ + "/left", 1);
      if (server_) {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.rendezvous_timeout_s);
        while (store_->add(session_ + "/left", 0) < size() && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
    } catch (const std::exception&) {
      // The job is ending; a lost store changes nothing now.
    }
  }
}

std::string Communicator::transport() const {
  if (mpi_group_) return "mpi";
  if (links_->tcp > 0 && links_->shm > 0) return "mixed";
  if (links_->shm > 0) return "shm";
  if (links_->tcp > 0) return "tcp";
  return "none";
}

void Communicator::connect_group(const std::string& prefix) {
  const int n = size();
  const int me = global_rank();
  links_ = std::make_unique<GroupLinks>();
  links_->peers.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) links_->peers[i].global_rank = members_[i];
  const std::string my_host = host_id();
  const std::string key_base = session_ + "/" + prefix + "/";
  const double timeout = options_.rendezvous_timeout_s;

  // 1. Publish my endpoint, gather everyone's.
  int port = 0;
  Socket listener = listen_tcp(is_loopback(info_.master_addr) ? "127.0.0.1" : "0.0.0.0", 0, &port);
  std::string my_cores;
  for (int c : allowed_cores()) my_cores += (my_cores.empty() ? "" : ",") + std::to_string(c);
  store_->set(key_base + "ep/" + std::to_string(me), store_->local_address() + "|" + std::to_string(port) + "|" +
                                                         my_host + "|" + std::to_string(::getpid()) + "|" + my_cores);
  std::vector<std::string> keys;
  for (int g : members_) keys.push_back(key_base + "ep/" + std::to_string(g));
  auto missing = store_->wait_all(keys, timeout);
  if (!missing.empty()) {
    std::vector<int> ranks;
    for (const auto& k : missing) ranks.push_back(std::stoi(k.substr(k.rfind('/') + 1)));
    throw CommError("rendezvous of " + name_ + ": rank" + (ranks.size() > 1 ? "s " : " ") + join_ranks(ranks) +
                        " did not join within " + std::to_string(static_cast<int>(timeout)) + " s",
                    "rendezvous", me, ranks.front(), timeout);
  }
  std::vector<std::string> ip(n), host(n), cores(n);
  std::vector<int> ports(n), pids(n);
  for (int i = 0; i < n; ++i) {
    auto parts = split(*store_->get(keys[i], timeout), '|');
    if (parts.size() != 5) throw CommError("rendezvous: malformed endpoint of rank " + std::to_string(members_[i]));
    ip[i] = parts[0];
    ports[i] = std::stoi(parts[1]);
    host[i] = parts[2];
    pids[i] = std::stoi(parts[3]);
    cores[i] = parts[4];
  }
  links_->host_of = host;
  // More ranks of the job on this host than cores they may run on? Then some share a core,
  // and a waiting rank yields the core at once instead of spinning on it first. A property
  // of the job's processes, not of a group: sub-groups take the world's (new_group).
  if (name_ == "world") {
    std::set<std::string> used;
    int on_host = 0;
    for (int i = 0; i < n; ++i) {
      if (host[i] != my_host) continue;
      ++on_host;
      for (const auto& c : split(cores[i], ',')) used.insert(c);
    }
    links_->shares_core = on_host > static_cast<int>(used.size());
  }

  // Ranks per host, when every host holds the same number of consecutive ranks.
  {
    int local = 0;
    for (int i = 0; i < n; ++i) local += host[i] == my_host;
    bool regular = n % local == 0;
    for (int i = 0; i < n && regular; ++i) regular = host[i] == host[(i / local) * local];
    links_->local_world = regular ? local : 0;
  }

  // 2. Choose a transport per peer.
  std::vector<bool> use_shm(n, false);
  for (int i = 0; i < n; ++i) {
    if (i == rank_) continue;
    bool same_host = host[i] == my_host;
    if (options_.transport == "shm" && !same_host) {
      throw ConfigError("WEFT_TRANSPORT=shm, but rank " + std::to_string(members_[i]) + " runs on another host");
    }
    use_shm[i] = options_.transport == "shm" || (options_.transport == "auto" && same_host);
  }

  // 3. Shared memory: my segment holds one incoming ring per local peer.
  std::vector<int> local_index(n, -1);
  int locals = 0;
  for (int i = 0; i < n; ++i)
    if (i == rank_ || use_shm[i]) local_index[i] = locals++;
  if (locals > 1) {
    auto seg_name = [&](int g) { return session_ + "-" + std::to_string(std::hash<std::string>{}(prefix)) + "-" +
                                         std::to_string(g); };
    links_->my_segment = ShmSegment::create(seg_name(me), locals, options_.shm_ring_bytes);
    links_->bell = &links_->my_segment->doorbell();
    store_->set(key_base + "shm/" + std::to_string(me), "1");
    links_->peer_segments.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      if (!use_shm[i]) continue;
      if (!store_->get(key_base + "shm/" + std::to_string(members_[i]), timeout)) {
        throw CommError("rendezvous: rank " + std::to_string(members_[i]) + " did not create its shared memory");
      }
      links_->peer_segments[i] = ShmSegment::open(seg_name(members_[i]));
      ShmSegment& peer = *links_->peer_segments[i];
      auto ch = std::make_unique<ShmChannel>(peer.ring(local_index[rank_]), peer.ring_data(local_index[rank_]),
                                             links_->my_segment->ring(local_index[i]),
                                             links_->my_segment->ring_data(local_index[i]),
                                             links_->my_segment->ring_bytes(), peer.doorbell(), pids[i]);
      links_->peers[i].channel = ch.get();
      links_->peers[i].pid = pids[i];
      links_->channels.push_back(std::move(ch));
      ++links_->shm;
    }
  }

  // 4. TCP: the lower group rank connects, the higher accepts (in a thread of its own).
  int expected = 0;
  for (int i = 0; i < rank_; ++i) expected += !use_shm[i] && i != rank_;
  std::vector<Socket> accepted(n);
  std::exception_ptr accept_error;
  std::thread acceptor([&] {
    try {
      Deadline d = Deadline::in(timeout);
      int got = 0;
      while (got < expected) {
        std::string peer_addr;
        Socket s = accept_tcp(listener.fd(), d, &peer_addr);
        if (!s.valid()) throw CommError("rendezvous of " + name_ + ": peers did not connect within the timeout");
        std::uint32_t who;
        try {
          who = accept_handshake(s.fd(), token_, Purpose::kPeer, static_cast<std::uint32_t>(me), 10.0);
        } catch (const CommError& e) {
          std::fprintf(stderr, "weft rank %d: refused a connection from %s (%s)\n", me, peer_addr.c_str(), e.what());
          continue;
        }
        auto it = std::find(members_.begin(), members_.end(), static_cast<int>(who));
        int idx = static_cast<int>(it - members_.begin());
        if (it == members_.end() || idx >= rank_ || use_shm[idx] || accepted[idx].valid()) {
          std::fprintf(stderr, "weft rank %d: refused an unexpected connection from rank %u\n", me, who);
          continue;
        }
        accepted[idx] = std::move(s);
        ++got;
      }
    } catch (...) {
      accept_error = std::current_exception();
    }
  });
  std::exception_ptr connect_error;
  try {
    for (int i = rank_ + 1; i < n; ++i) {
      if (use_shm[i]) continue;
      Socket s = connect_tcp(ip[i], ports[i], Deadline::in(timeout));
      connect_handshake(s.fd(), token_, Purpose::kPeer, static_cast<std::uint32_t>(me), 10.0);
      accepted[i] = std::move(s);
    }
  } catch (...) {
    connect_error = std::current_exception();
  }
  acceptor.join();
  if (connect_error) std::rethrow_exception(connect_error);
  if (accept_error) std::rethrow_exception(accept_error);
  for (int i = 0; i < n; ++i) {
    if (i == rank_ || use_shm[i]) continue;
    auto ch = std::make_unique<TcpChannel>(std::move(accepted[i]));
    links_->peers[i].channel = ch.get();
    links_->channels.push_back(std::move(ch));
    ++links_->tcp;
  }

  // 5. Everyone is connected: shared-memory names can go (the mappings stay).
  store_->set(key_base + "ready/" + std::to_string(me), "1");
  std::vector<std::string> ready;
  for (int g : members_) ready.push_back(key_base + "ready/" + std::to_string(g));
  missing = store_->wait_all(ready, timeout);
  if (!missing.empty()) throw CommError("rendezvous of " + name_ + ": not every rank finished connecting");
  if (links_->my_segment) links_->my_segment->unlink();
}

// --- the worker ---

WorkPtr Communicator::submit(std::shared_ptr<Task> task) {
  WorkPtr w = task->work;
  w->owner_ = this;
  w->p2p_ = task->kind != Task::kCollective;
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(task));
  // The worker is not woken here: most operations are waited for at once, and the waiting
  // thread runs them itself. Waking a thread that finds nothing to do costs two context
  // switches, the better part of a small all-reduce when ranks share cores.
  return w;
}

std::vector<std::shared_ptr<Communicator::Task>> Communicator::take_batch() {
  // Called with mu_ held, the queue non-empty and nothing running.
  std::vector<std::shared_ptr<Task>> batch{queue_.front()};
  queue_.pop_front();
  // Point-to-point operations issued back to back run as one step.
  if (batch[0]->kind != Task::kCollective) {
    while (!queue_.empty() && queue_.front()->kind != Task::kCollective) {
      batch.push_back(queue_.front());
      queue_.pop_front();
    }
    p2p_demanded_ = false;
  }
  if (queue_.empty()) started_ = false;
  running_ = true;
  return batch;
}

void Communicator::run_batch(std::vector<std::shared_ptr<Task>>& batch) {
  std::exception_ptr error;
  try {
    if (batch[0]->kind == Task::kCollective) run(*batch[0]); else run_p2p_batch(batch);
  } catch (...) {
    error = std::current_exception();
    healthy_ = false;
  }
  bool wake_worker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    wake_worker = stop_ || (started_ && ready_locked());
  }
  idle_cv_.notify_all();
  if (wake_worker) cv_.notify_all();
  for (auto& t : batch) t->work->finish(error);
}

bool Communicator::ready_locked() const {
  if (queue_.empty() || running_) return false;
  if (queue_.front()->kind == Task::kCollective || p2p_demanded_) return true;
  // Point-to-point tasks wait until someone waits on one of them or a collective follows
  // them, so that all the sends and receives posted together run together.
  for (const auto& t : queue_)
    if (t->kind == Task::kCollective) return true;
  return false;
}

void Communicator::drive(Work* work) {
  for (;;) {
    std::vector<std::shared_ptr<Task>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      idle_cv_.wait(lock, [&] { return !running_; });
      bool queued = false;
      for (const auto& t : queue_) queued = queued || t->work.get() == work;
      if (!queued) return;  // it ran, or is finishing
      // Everything before it runs first, in order; point-to-point tasks in front of it (or
      // with it) run now.
      if (queue_.front()->kind != Task::kCollective) p2p_demanded_ = true;
      batch = take_batch();
    }
    run_batch(batch);
  }
}

void Communicator::start(bool p2p) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) return;  // it is running (or done)
    if (started_ && (p2p_demanded_ || !p2p)) return;  // already under way: no wake-up
    started_ = true;
    if (p2p) p2p_demanded_ = true;
  }
  cv_.notify_all();
}

void Communicator::worker() {
  for (;;) {
    std::vector<std::shared_ptr<Task>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return (stop_ && !running_) || (started_ && ready_locked()); });
      if (!ready_locked()) {
        if (queue_.empty()) return;
        p2p_demanded_ = true;  // stopping: run what is left
        continue;
      }
      batch = take_batch();
    }
    run_batch(batch);
  }
}

std::string Communicator::choose_algorithm(Collective c, std::int64_t bytes) const {
  if (auto a = env_string(env_name_for(c))) return *a;
  // Measured with weft comm-bench on a 2-core machine with 2, 3 and 4 ranks over shared
  // memory (docs/communication.md has the figures); across hosts the ring's bandwidth
  // optimality dominates sooner, and hierarchical keeps the slow links rail-aligned.
  const int w = size();
  const bool across_hosts = links_->tcp > 0 && links_->shm > 0 && links_->local_world > 1;
  switch (c) {
    case Collective::kAllReduce:
      if (w <= 2) return bytes <= 1024 ? "recursive_doubling" : "ring";
      if (bytes <= 16 * 1024) return w <= 4 ? "recursive_doubling" : "rabenseifner";
      if (across_hosts) return bytes <= 1024 * 1024 ? "rabenseifner" : "hierarchical";
      // Over TCP alone, fewer and larger messages win: 4 ranks, 1 MiB: rabenseifner 675 us,
      // ring 819 (level from 8 MiB); 3 ranks: double_tree 536 us, ring 765 (4 MiB: 4.0 ms
      // against 4.9).
      if (links_->tcp > 0 && links_->shm == 0) {
        if ((w & (w - 1)) == 0) return bytes <= 1024 * 1024 ? "rabenseifner" : "ring";
        return "double_tree";
      }
      // 4 ranks on 2 cores: the ring, whose neighbours sit on different cores, wins from
      // 32 KiB (64 KiB: 37 us, rabenseifner 45, direct 65); 8 ranks: rabenseifner's fewer
      // steps win up to 64 KiB; 3 ranks: the tree's two halves beat the ring's 4 steps from
      // 256 KiB to 1 MiB.
      if ((w & (w - 1)) == 0) return w >= 8 && bytes <= 64 * 1024 ? "rabenseifner" : "ring";
      return bytes <= 128 * 1024 || bytes > 1024 * 1024 ? "ring" : "double_tree";
    case Collective::kBroadcast: return bytes <= 256 * 1024 ? "binomial" : "chain";
    case Collective::kReduce: return "binomial";
    case Collective::kGather: return "linear";
    case Collective::kScatter: return "linear";
    // 4 ranks: the ring from 8 KiB in all (allgather 16 KiB: 9.6 us, recursive doubling 13.2).
    case Collective::kAllGather: return bytes * w <= 4 * 1024 ? "recursive_doubling" : "ring";
    case Collective::kReduceScatter: return bytes * w <= 4 * 1024 ? "recursive_halving" : "ring";
    case Collective::kAllToAll: return "pairwise";
    case Collective::kBarrier: return "dissemination";
  }
  return "";
}

const algo::Program& Communicator::cached_program(Collective c, const std::string& algorithm, std::int64_t n,
                                                  const algo::Options& opts) {
  // Training issues the same few collectives over and over (DDP's buckets, a layer's
  // all-reduce): their programs are built once.
  ProgramKey key{static_cast<int>(c), algorithm, n, opts.fields()};
  auto it = programs_.find(key);
  if (it != programs_.end()) return it->second;
  if (programs_.size() >= 64) programs_.clear();
  return programs_.emplace(key, algo::build_program(c, algorithm, rank_, size(), n, opts)).first->second;
}

void Communicator::run(Task& t) {
  if (t.algorithm == "mpi") {
    run_mpi_native(t);
    return;
  }
  const int w = size(), r = rank_;
  const std::size_t es = element_size(t.dtype);
  const std::int64_t c = t.count;
  const std::size_t block_bytes = static_cast<std::size_t>(c) * es;
  algo::Options opts;
  opts.root = t.root;
  opts.local_world = links_->local_world;
  const std::int64_t n = algo::data_elements(t.collective, c, w);
  ExecBuffers b;
  b.dtype = t.dtype;
  b.op = t.op;
  std::vector<std::uint8_t> temp;
  auto* out = static_cast<std::uint8_t*>(t.out);
  const auto* in = static_cast<const std::uint8_t*>(t.in);
  // memmove with possibly-null pointers when nothing is copied (empty buffers).
  auto move = [](std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  };
  auto copy_in = [&](std::uint8_t* dst, std::size_t bytes) { move(dst, in, bytes); };
  switch (t.collective) {
    case Collective::kAllReduce:
      // Out of place, the program reads the input where it has not written the output yet
      // (no copy of the whole buffer first); in place (or overlapping) calls copy.
      if ((in + block_bytes <= out || out + block_bytes <= in) && block_bytes > 0) {
        opts.out_of_place = true;
        b.input = in;
      } else {
        copy_in(out, block_bytes);
      }
      b.data = out;
      break;
    case Collective::kBroadcast:
      b.data = out;
      break;
    case Collective::kReduce:
      if (r == t.root) {
        copy_in(out, block_bytes);
        b.data = out;
      } else {
        temp.assign(in, in + block_bytes);
        b.data = temp.data();
      }
      break;
    case Collective::kGather:
      if (r == t.root) {
        move(out + r * block_bytes, in, block_bytes);
        b.data = out;
      } else {
        b.data = const_cast<std::uint8_t*>(in);
        b.data_origin = r * c;
      }
      break;
    case Collective::kScatter:
      if (r == t.root) {
        move(out, in + r * block_bytes, block_bytes);
        b.data = const_cast<std::uint8_t*>(in);
      } else {
        b.data = out;
        b.data_origin = r * c;
      }
      break;
    case Collective::kAllGather:
      move(out + r * block_bytes, in, block_bytes);
      b.data = out;
      break;
    case Collective::kReduceScatter:
      temp.assign(in, in + block_bytes * w);
      b.data = temp.data();
      break;
    case Collective::kAllToAll:
      if (in == out) {
        temp.assign(in, in + block_bytes * w);
        in = temp.data();
      }
      b.input = in;
      b.data = out;
      break;
    case Collective::kBarrier:
      break;
  }
  const std::string algorithm = t.algorithm.empty() ? choose_algorithm(t.collective, static_cast<std::int64_t>(block_bytes)) : t.algorithm;
  const algo::Program& program = cached_program(t.collective, algorithm, n, opts);
  std::vector<std::uint8_t> scratch(static_cast<std::size_t>(program.scratch) * es);
  b.scratch = scratch.data();
  ExecContext ctx{algo::collective_name(t.collective), global_rank(), options_.timeout_s, links_->bell,
                  !links_->shares_core};
  TraceRecord rec;
  if (tracer_) rec.start_us = now_us();
  if (mpi_group_) {
    mpi::execute(program, b, *mpi_group_, ctx, tracer_ ? &rec.steps : nullptr);
    for (auto& step : rec.steps)
      for (auto& send : step) send.first = members_[send.first];
  } else {
    execute(program, b, links_->peers, ctx, tracer_ ? &rec.steps : nullptr);
  }
  if (t.collective == Collective::kReduceScatter) move(out, temp.data() + r * block_bytes, block_bytes);
  if (t.op == ReduceOp::kAvg) {
    if (t.collective == Collective::kAllReduce || (t.collective == Collective::kReduce && r == t.root) ||
        t.collective == Collective::kReduceScatter) {
      scale_for_average(t.dtype, out, static_cast<std::size_t>(c), w);
    }
  }
  if (tracer_) {
    rec.end_us = now_us();
    rec.op = algo::collective_name(t.collective);
    rec.algorithm = algorithm;
    rec.group = name_;
    rec.group_ranks = members_;
    rec.rank = global_rank();
    rec.dtype = dtype_name(t.dtype);
    const algo::CollectiveFacts& f = algo::facts(t.collective);
    if (f.reduces) rec.reduce = op_name(t.op);
    rec.count = c;
    rec.bytes = static_cast<std::int64_t>(block_bytes);
    if (f.rooted) rec.root = members_[t.root];
    tracer_->write(rec);
  }
}

void Communicator::run_p2p_batch(std::vector<std::shared_ptr<Task>>& batch) {
  algo::Program p;
  ExecBuffers b;
  for (auto& t : batch) {
    std::int64_t bytes = t->count * static_cast<std::int64_t>(element_size(t->dtype));
    if (t->kind == Task::kSend) {
      p.send(0, t->peer, algo::Chunk{algo::Buf::kData, 0, bytes});
      b.direct.push_back(const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(t->in)));
    } else {
      p.recv(0, t->peer, algo::Chunk{algo::Buf::kData, 0, bytes});
      b.direct.push_back(static_cast<std::uint8_t*>(t->out));
    }
  }
  ExecContext ctx{batch.size() == 1 ? (batch[0]->kind == Task::kSend ? "send" : "recv") : "send/recv",
                  global_rank(), options_.timeout_s, links_->bell, !links_->shares_core};
  const std::int64_t start = tracer_ ? now_us() : 0;
  if (mpi_group_) {
    mpi::execute(p, b, *mpi_group_, ctx, nullptr);
  } else {
    execute(p, b, links_->peers, ctx, nullptr);
  }
  if (tracer_) {
    const std::int64_t end = now_us();
    for (auto& t : batch) {
      TraceRecord rec;
      rec.op = t->kind == Task::kSend ? "send" : "recv";
      rec.group = name_;
      rec.group_ranks = members_;
      rec.rank = global_rank();
      rec.dtype = dtype_name(t->dtype);
      rec.count = t->count;
      rec.bytes = t->count * static_cast<std::int64_t>(element_size(t->dtype));
      rec.peers = {members_[t->peer]};
      rec.start_us = start;
      rec.end_us = end;
      if (t->kind == Task::kSend) rec.steps = {{{members_[t->peer], rec.bytes}}};
      tracer_->write(rec);
    }
  }
}

void Communicator::check_algorithm(Collective c, const std::string& algorithm) const {
  if (algorithm.empty()) return;
  if (algorithm == "mpi") {
    if (!mpi_group_) throw ConfigError("the mpi algorithm needs WEFT_TRANSPORT=mpi (under mpirun)");
    return;
  }
  algo::find_algorithm(c, algorithm);
}

// MPI's own collective on the user's buffers (for comparison with weft's schedules).
void Communicator::run_mpi_native(Task& t) {
  const int w = size();
  const std::size_t es = element_size(t.dtype);
  const std::size_t block_bytes = static_cast<std::size_t>(t.count) * es;
  const void* in = t.in;
  std::vector<std::uint8_t> copy;
  const bool blocks = t.collective == Collective::kGather || t.collective == Collective::kScatter ||
                      t.collective == Collective::kAllGather || t.collective == Collective::kReduceScatter ||
                      t.collective == Collective::kAllToAll;
  if (blocks && in != nullptr && t.out != nullptr) {
    // MPI forbids overlapping send and receive buffers here: copy the input aside.
    const auto* ib = static_cast<const std::uint8_t*>(in);
    const auto* ob = static_cast<const std::uint8_t*>(t.out);
    std::size_t in_bytes = block_bytes * ((t.collective == Collective::kGather || t.collective == Collective::kAllGather) ? 1 : w);
    std::size_t out_bytes = block_bytes * ((t.collective == Collective::kScatter || t.collective == Collective::kReduceScatter) ? 1 : w);
    if (ib < ob + out_bytes && ob < ib + in_bytes) {
      copy.assign(ib, ib + in_bytes);
      in = copy.data();
    }
  }
  TraceRecord rec;
  if (tracer_) rec.start_us = now_us();
  mpi::native(t.collective, *mpi_group_, in, t.out, t.count, t.dtype, t.op, t.root);
  if (t.op == ReduceOp::kAvg &&
      (t.collective == Collective::kAllReduce || (t.collective == Collective::kReduce && rank_ == t.root) ||
       t.collective == Collective::kReduceScatter)) {
    scale_for_average(t.dtype, t.out, static_cast<std::size_t>(t.count), w);
  }
  if (tracer_) {
    rec.end_us = now_us();
    rec.op = algo::collective_name(t.collective);
    rec.algorithm = "mpi";
    rec.group = name_;
    rec.group_ranks = members_;
    rec.rank = global_rank();
    rec.dtype = dtype_name(t.dtype);
    rec.count = t.count;
    rec.bytes = static_cast<std::int64_t>(block_bytes);
    tracer_->write(rec);
  }
}

// --- the public operations ---

namespace {
void check_count(std::int64_t count) {
  if (count < 0) throw ConfigError("element count must be >= 0, got " + std::to_string(count));
}
}  // namespace

WorkPtr Communicator::allreduce(const void* in, void* out, std::int64_t count, DataType t, ReduceOp op,
                                const std::string& algorithm) {
  check_count(count);
  auto task = std::make_shared<Task>();
  task->collective = Collective::kAllReduce;
  task->in = in;
  task->out = out;
  task->count = count;
  task->dtype = t;
  task->op = op;
  task->algorithm = algorithm;
  check_algorithm(task->collective, algorithm);
  return submit(task);
}

#define WEFT_SIMPLE_TASK(COLL)                                                     \
  check_count(count);                                                              \
  auto task = std::make_shared<Task>();                                            \
  task->collective = COLL;                                                         \
  task->count = count;                                                             \
  task->dtype = t;                                                                 \
  task->algorithm = algorithm;                                                     \
  check_algorithm(task->collective, algorithm);

WorkPtr Communicator::broadcast(void* data, std::int64_t count, DataType t, int root, const std::string& algorithm) {
  WEFT_SIMPLE_TASK(Collective::kBroadcast)
  if (root < 0 || root >= size()) throw ConfigError("broadcast: root " + std::to_string(root) + " is outside the group");
  task->in = data;
  task->out = data;
  task->root = root;
  return submit(task);
}

WorkPtr Communicator::reduce(const void* in, void* out, std::int64_t count, DataType t, ReduceOp op, int root,
                             const std::string& algorithm) {
  WEFT_SIMPLE_TASK(Collective::kReduce)
  if (root < 0 || root >= size()) throw ConfigError("reduce: root " + std::to_string(root) + " is outside the group");
  task->in = in;
  task->out = out;
  task->op = op;
  task->root = root;
  return submit(task);
}

WorkPtr Communicator::gather(const void* in, void* out, std::int64_t count, DataType t, int root,
                             const std::string& algorithm) {
  WEFT_SIMPLE_TASK(Collective::kGather)
  if (root < 0 || root >= size()) throw ConfigError("gather: root " + std::to_string(root) + " is outside the group");
  task->in = in;
  task->out = out;
  task->root = root;
  return submit(task);
}

WorkPtr Communicator::scatter(const void* in, void* out, std::int64_t count, DataType t, int root,
                              const std::string& algorithm) {
  WEFT_SIMPLE_TASK(Collective::kScatter)
  if (root < 0 || root >= size()) throw ConfigError("scatter: root " + std::to_string(root) + " is outside the group");
  task->in = in;
  task->out = out;
  task->root = root;
  return submit(task);
}

WorkPtr Communicator::allgather(const void* in, void* out, std::int64_t count, DataType t,
                                const std::string& algorithm) {
  WEFT_SIMPLE_TASK(Collective::kAllGather)
  task->in = in;
  task->out = out;
  return submit(task);
}

WorkPtr Communicator::reduce_scatter(const void* in, void* out, std::int64_t count, DataType t, ReduceOp op,
                                     const std::string& algorithm) {
  WEFT_SIMPLE_TASK(Collective::kReduceScatter)
  task->in = in;
  task->out = out;
  task->op = op;
  return submit(task);
}

WorkPtr Communicator::alltoall(const void* in, void* out, std::int64_t count, DataType t,
                               const std::string& algorithm) {
  WEFT_SIMPLE_TASK(Collective::kAllToAll)
  task->in = in;
  task->out = out;
  return submit(task);
}

#undef WEFT_SIMPLE_TASK

WorkPtr Communicator::barrier() {
  auto task = std::make_shared<Task>();
  task->collective = Collective::kBarrier;
  return submit(task);
}

WorkPtr Communicator::isend(const void* data, std::int64_t count, DataType t, int peer) {
  check_count(count);
  if (peer < 0 || peer >= size() || peer == rank_) throw ConfigError("send: invalid peer " + std::to_string(peer));
  auto task = std::make_shared<Task>();
  task->kind = Task::kSend;
  task->in = data;
  task->count = count;
  task->dtype = t;
  task->peer = peer;
  return submit(task);
}

WorkPtr Communicator::irecv(void* data, std::int64_t count, DataType t, int peer) {
  check_count(count);
  if (peer < 0 || peer >= size() || peer == rank_) throw ConfigError("recv: invalid peer " + std::to_string(peer));
  auto task = std::make_shared<Task>();
  task->kind = Task::kRecv;
  task->out = data;
  task->count = count;
  task->dtype = t;
  task->peer = peer;
  return submit(task);
}

}  // namespace weft::comm
