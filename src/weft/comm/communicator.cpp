#include "weft/comm/communicator.h"

#include <fmt/format.h>

#include "weft/algo/collective_facts.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <cstring>

#include "weft/algo/registry.h"
#include "weft/comm/auth.h"
#include "weft/comm/channel.h"
#include "weft/comm/executor.h"
#include "weft/comm/links.h"
#include "weft/comm/mpi_transport.h"
#include "weft/comm/socket.h"
#include "weft/comm/store.h"
#include "weft/comm/selection.h"
#include "weft/comm/trace.h"
#include "weft/util/env.h"
#include "weft/util/parse.h"

namespace weft::comm {

using algo::Collective;

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
  if (auto u = env_int_in("WEFT_SPIN_US", 0, 1000000)) o.wait.pause_us = std::chrono::microseconds(*u);
  if (auto u = env_int_in("WEFT_YIELD_US", 0, 1000000)) o.wait.yield_us = std::chrono::microseconds(*u);
  if (auto d = env_string("WEFT_TRACE")) o.trace_dir = *d;
  if (auto t = env_string("WEFT_TLS")) {
    if (*t != "0" && *t != "1") throw ConfigError("WEFT_TLS='" + *t + "' is not 0 or 1");
    o.tls = *t == "1";
  }
  if (auto t = env_string("WEFT_STRIPE")) {
    const bool tcp = t->rfind("tcp:", 0) == 0 && t->size() == 5 && (*t)[4] >= '2' && (*t)[4] <= '8';
    if (*t != "off" && *t != "shm+tcp" && !tcp)
      throw ConfigError("WEFT_STRIPE='" + *t + "' is not off, shm+tcp or tcp:N (N from 2 to 8)");
    o.stripe = *t;
  }
  if (auto t = env_string("WEFT_STRIPE_SHARES")) {
    const auto shares = parse_number_list(*t, ':', 8);
    if (!shares || std::any_of(shares->begin(), shares->end(), [](double v) { return !(v > 0 && v < 1e9); }))
      throw ConfigError("WEFT_STRIPE_SHARES='" + *t + "' is not up to 8 positive numbers such as 3:1");
    o.stripe_shares = *shares;
  }
  if (auto m = env_int_in("WEFT_STRIPE_MIN", 1, std::int64_t{1} << 40)) o.stripe_min = static_cast<std::uint64_t>(*m);
  if (auto a = env_string("WEFT_STRIPE_ADDRS")) {
    const auto addresses = split_list(*a, ',', 7);
    if (!addresses || std::any_of(addresses->begin(), addresses->end(), [](std::string_view address) {
          return address.empty() || address.size() > 253 || address.find_first_of("|: ") != std::string_view::npos;
        }))
      throw ConfigError("WEFT_STRIPE_ADDRS='" + *a + "' is not up to 7 addresses of this host, comma-separated");
    o.stripe_addresses.assign(addresses->begin(), addresses->end());
    if (o.stripe.rfind("tcp:", 0) != 0)
      throw ConfigError("WEFT_STRIPE_ADDRS gives the addresses of WEFT_STRIPE=tcp:N's connections: set WEFT_STRIPE too");
  }
  return o;
}


// --- construction ---

std::shared_ptr<Communicator> Communicator::init() { return init(process_info_from_env(), CommOptions::from_env()); }

std::shared_ptr<Communicator> Communicator::init(const ProcessInfo& info, const CommOptions& options) {
  return init(info, options, ExternalRendezvous{});
}

std::shared_ptr<Communicator> Communicator::init(const ProcessInfo& info, const CommOptions& options,
                                                 const ExternalRendezvous& via) {
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
    if (!options.trace_dir.empty()) check_trace_folder(options.trace_dir, world);
    c->rank_ = rank;
    c->members_.resize(static_cast<size_t>(world));
    for (int i = 0; i < world; ++i) c->members_[i] = i;
    c->links_ = std::make_unique<GroupLinks>();
    // mpirun places ranks by host in blocks of the local size (its default mapping).
    if (info.local_world > 0 && world % info.local_world == 0) c->links_->local_world = info.local_world;
    c->mpi_group_ = mpi::world_group();
    if (!options.trace_dir.empty()) c->tracer_ = std::make_shared<Tracer>(options.trace_dir, rank);
    c->start_queue();
    c->healthy_ = true;
    return c;
  }
  if (!options.trace_dir.empty()) check_trace_folder(options.trace_dir, info.world);
  c->rank_ = info.rank;
  c->members_.resize(static_cast<size_t>(info.world));
  for (int i = 0; i < info.world; ++i) c->members_[i] = i;
  std::string store_addr = info.master_addr;
  int port = info.master_port;
  if (via.publish) {
    // Rank 0's store on a free port of its host; the others learn where from `via`.
    if (info.rank == 0) {
      c->token_ = env_string("WEFT_JOB_TOKEN") ? job_token_from_env() : generate_token();
      c->server_ = std::make_shared<StoreServer>(bind_address_for(info.master_addr), 0, c->token_);
      port = c->server_->port();
      via.publish(store_addr + " " + std::to_string(port) + " " + c->token_);
    } else {
      const std::string where = via.lookup();
      const auto first = where.find(' '), second = where.find(' ', first + 1);
      const auto parsed = first == std::string::npos || second == std::string::npos
                              ? std::nullopt : parse_integer(where.substr(first + 1, second - first - 1));
      if (!parsed || *parsed < 1 || *parsed > 65535)
        throw CommError("rendezvous: rank 0 published no store address ('" + where.substr(0, 64) + "')");
      store_addr = where.substr(0, first);
      port = static_cast<int>(*parsed);
      c->token_ = where.substr(second + 1);
    }
  } else {
    // A job of one process needs no shared secret: it makes its own.
    c->token_ = info.world == 1 && !env_string("WEFT_JOB_TOKEN") ? generate_token() : job_token_from_env();
    // A job of one process that nobody launched talks only to itself: its store takes any
    // free port, so that several such jobs (and tests) can run side by side.
    const bool alone = info.world == 1 && info.launcher == "none" && !env_string("MASTER_PORT");
    if (alone) store_addr = "127.0.0.1";
    if (info.rank == 0) {
      c->server_ = std::make_shared<StoreServer>(alone ? "127.0.0.1" : bind_address_for(info.master_addr),
                                                 alone ? 0 : port, c->token_);
      if (alone) port = c->server_->port();
    }
  }
  c->store_ = std::make_shared<StoreClient>(store_addr, port, c->token_, static_cast<std::uint32_t>(info.rank),
                                            options.rendezvous_timeout_s);
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
  c->start_queue();
  c->healthy_ = true;
  return c;
}

std::shared_ptr<Communicator> Communicator::init(const ProcessInfo& info, const CommOptions& options,
                                                 std::shared_ptr<StoreClient> store, const std::string& token,
                                                 const std::string& session) {
  std::shared_ptr<Communicator> c(new Communicator());
  c->info_ = info;
  c->options_ = options;
  c->rank_ = info.rank;
  c->members_.resize(static_cast<size_t>(info.world));
  for (int i = 0; i < info.world; ++i) c->members_[i] = i;
  c->token_ = token;
  c->store_ = std::move(store);
  c->session_ = session;
  if (!options.trace_dir.empty()) c->tracer_ = std::make_shared<Tracer>(options.trace_dir, info.rank);
  c->connect_group("world");
  c->start_queue();
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
    c->links_->wait = links_->wait;
  }
  c->start_queue();
  c->healthy_ = true;
  return c;
}

Communicator::~Communicator() {
  ops_.reset();  // runs what is left and stops its thread
  // Rank 0 serves the store: it stays until every rank has left, since others may still
  // need the store (to form groups, say) after rank 0 is done. Not while an error unwinds
  // the stack: the others may be blocked waiting for this rank and never leave, and the
  // error must reach the user (and the launcher stop the job) now, not after the timeout.
  // A rank whose group failed an operation (a refused mismatch, say) and ends normally
  // still says it left: its peer may have succeeded and wait for it.
  if (name_ == "world" && store_ && std::uncaught_exceptions() == 0) {
    try {
      store_->add(session_ + "/left", 1);
      if (server_ && healthy_) {
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
  if (links_->striped > 0) {  // "striped shm+tcp (0.74:0.26 to rank 1 via shm, 127.0.0.1; ...)"
    std::string text = "striped " + options_.stripe;
    text += options_.tls ? "+tls (" : " (";
    bool first = true;
    for (const PeerLink& link : links_->peers) {
      if (link.lanes.empty()) continue;
      text += first ? "" : "; ";
      std::string shares, via;
      for (std::size_t k = 0; k < link.lanes.size(); ++k) {
        shares += fmt::format("{}{:.2f}", k ? ":" : "", link.lanes[k].share);
        via += fmt::format("{}{}", k ? ", " : "", link.lanes[k].where);
      }
      text += fmt::format("{} to rank {} via {}", shares, link.global_rank, via);
      first = false;
    }
    text += ")";
    return text;
  }
  if (links_->tcp > 0 && links_->shm > 0) return options_.tls ? "mixed+tls" : "mixed";
  if (links_->shm > 0) return "shm";
  if (links_->tcp > 0) return options_.tls ? "tls" : "tcp";
  return "none";
}

void Communicator::connect_group(const std::string& prefix) {
  LinkRequest r;
  r.store = store_.get();
  r.session = session_;
  r.prefix = prefix;
  r.group = name_;
  r.members = members_;
  r.rank = rank_;
  r.token = token_;
  r.master_addr = info_.master_addr;
  r.transport = options_.transport;
  r.tls = options_.tls;
  r.shm_ring_bytes = options_.shm_ring_bytes;
  r.tcp_connections = options_.stripe.rfind("tcp:", 0) == 0 ? options_.stripe[4] - '0' : 1;
  r.shm_and_tcp = options_.stripe == "shm+tcp";
  r.stripe_shares = options_.stripe_shares;
  r.stripe_addresses = options_.stripe_addresses;
  r.stripe_min = options_.stripe_min;
  r.wait = options_.wait;
  r.timeout_s = options_.rendezvous_timeout_s;
  r.judge_core_sharing = name_ == "world";
  links_ = connect_links(r);
}

// --- running a batch of the queue ---

void Communicator::run_batch(std::vector<std::shared_ptr<Task>>& batch) {
  // After a failed operation the group's links are in an unknown state (a peer may have
  // sent part of a message): nothing more runs on them.
  if (!healthy_.load()) {
    std::lock_guard<std::mutex> lock(failure_mu_);
    throw CommError(name_ + ": an earlier operation failed on this group" + (failure_.empty() ? "" : " (" + failure_ + ")"));
  }
  try {
    if (batch[0]->kind == Task::kCollective) run(*batch[0]); else run_p2p_batch(batch);
  } catch (const ConfigError&) {
    throw;  // refused before any byte moved (an algorithm that does not fit the layout): still usable
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(failure_mu_);
      if (failure_.empty()) failure_ = e.what();
    }
    healthy_ = false;
    // The peers still waiting in this operation hear of it now, not at their timeout.
    if (links_)
      for (auto& ch : links_->channels)
        if (ch) ch->abort();
    throw;
  }
}

void Communicator::trace_mark(const std::string& name) {
  if (tracer_) tracer_->mark(name, global_rank());
}

std::string Communicator::choose_algorithm(Collective c, std::int64_t bytes) const {
  return select_algorithm(c, bytes, LinkShape{size(), links_->tcp, links_->shm, links_->local_world});
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
  std::vector<std::uint8_t>& temp = temp_;  // kept from call to call: no allocation, no page faults
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
  const auto scratch_bytes = static_cast<std::size_t>(program.scratch) * es;
  if (scratch_.size() < scratch_bytes) scratch_.resize(scratch_bytes);  // grows, kept from call to call
  b.scratch = scratch_.data();
  ExecContext ctx{algo::collective_name(t.collective), global_rank(), options_.timeout_s, links_->bell,
                  links_->wait, collective_signature(t.collective, t.dtype, t.op, c, t.root)};
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
    StepSends steps = std::move(rec.steps);
    const std::int64_t start = rec.start_us;
    rec = collective_record(t.collective, algorithm, {name_, members_, global_rank()}, t.dtype, t.op, c, t.root);
    rec.steps = std::move(steps);
    rec.start_us = start;
    rec.end_us = now_us();
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
    b.direct_signatures.push_back(point_to_point_signature(t->dtype, t->count));
  }
  ExecContext ctx{batch.size() == 1 ? (batch[0]->kind == Task::kSend ? "send" : "recv") : "send/recv",
                  global_rank(), options_.timeout_s, links_->bell, links_->wait, {}};
  const std::int64_t start = tracer_ ? now_us() : 0;
  if (mpi_group_) {
    mpi::execute(p, b, *mpi_group_, ctx, nullptr);
  } else {
    execute(p, b, links_->peers, ctx, nullptr);
  }
  if (tracer_) {
    const std::int64_t end = now_us();
    for (auto& t : batch) {
      TraceRecord rec =
          point_to_point_record(t->kind == Task::kSend, {name_, members_, global_rank()}, t->dtype, t->count, t->peer);
      rec.start_us = start;
      rec.end_us = end;
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
    const std::int64_t start = rec.start_us;
    rec = collective_record(t.collective, "mpi", {name_, members_, global_rank()}, t.dtype, t.op, t.count, t.root);
    rec.start_us = start;
    rec.end_us = now_us();
    tracer_->write(rec);
  }
}

void Communicator::start_queue() {
  ops_ = std::make_unique<OperationQueue>([this](std::vector<std::shared_ptr<Task>>& batch) { run_batch(batch); });
}

WorkPtr Communicator::submit(std::shared_ptr<Task> task) { return ops_->submit(std::move(task)); }

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
