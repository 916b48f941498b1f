#include "weft/serve/replicas.h"

#include <fmt/format.h>
#include <httplib.h>

#include <cstdio>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "weft/comm/process.h"
#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/parse.h"

namespace weft::serve {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string exit_reason(int status) {
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return fmt::format("exit code {}", WEXITSTATUS(status));
}

}  // namespace

// (No one waits for a lease's end: acquire waits for a ready replica, the monitor for its
// next round.)
ReplicaSet::Lease::~Lease() {
  std::lock_guard lock(set_.mu_);
  for (auto& r : set_.replicas_)
    if (r->slot == slot_) --r->outstanding;
  set_.count_outstanding();
}

// The load is sampled at every change, not only when the monitor looks: the monitor would
// otherwise read it just after the lease ends that woke it, and see a busy set as idle.
void ReplicaSet::count_outstanding() {
  std::int64_t outstanding = 0;
  for (auto& r : replicas_)
    if (!r->draining) outstanding += r->outstanding;
  load_.set(now_s(), static_cast<double>(outstanding));
}

ReplicaSet::ReplicaSet(ReplicaOptions options, std::FILE* log, Metrics& metrics)
    : o_(std::move(options)), log_(log), metrics_(metrics), cores_(comm::allowed_cores()) {
  metrics_.counter("weft_replica_restarts_total", "replicas restarted after they died");
  metrics_.counter("weft_scaling_events_total", "replicas added (up) or drained and stopped (down)");
  std::lock_guard lock(mu_);
  for (int i = 0; i < o_.min; ++i) {
    replicas_.push_back(std::make_unique<Replica>());
    replicas_.back()->slot = i;
    spawn(*replicas_.back());
  }
  publish();
  monitor_ = std::thread([this] { monitor(); });
}

ReplicaSet::~ReplicaSet() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  monitor_cv_.notify_all();
  monitor_.join();
  for (auto& r : replicas_)
    if (r->pid > 0) ::kill(r->pid, SIGTERM);
  const double deadline = now_s() + 10;
  for (auto& r : replicas_) {
    if (r->pid <= 0) continue;
    int status = 0;
    while (::waitpid(r->pid, &status, WNOHANG) == 0) {
      if (now_s() > deadline) {
        ::kill(r->pid, SIGKILL);
        ::waitpid(r->pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

// Starts replica r (under the lock): its own process group (a terminal's Ctrl-C reaches the
// front end only), stopped with the front end, bound to its share of the cores when the
// number of replicas is fixed.
void ReplicaSet::spawn(Replica& r) {
  // A port file no earlier process wrote: a replica started again in a slot (restarted, or
  // scaled up after that slot was drained) must not be found at its predecessor's port.
  if (!r.port_file.empty()) std::remove(r.port_file.c_str());
  r.port_file = fmt::format("{}/replica-{}-{}.port", o_.folder, r.slot, spawned_++);
  const bool fixed = o_.min == o_.max;
  // A replica of several ranks (--tp, --pp) is a job of its own: weft launch starts its ranks
  // (on the replica's cores when they are fixed), each with its share of the replica's threads.
  std::vector<std::string> args = {comm::self_executable()};
  args.insert(args.end(), o_.command.begin(), o_.command.end());
  if (o_.ranks > 1) args = comm::local_job_command(o_.ranks, {"--bind", fixed ? "cores" : "none"}, args);
  for (const char* a : {"--host", "127.0.0.1", "--port", "0", "--port-file"}) args.emplace_back(a);
  args.push_back(r.port_file);
  cpu_set_t bind;
  CPU_ZERO(&bind);
  std::size_t bound = 0;
  if (fixed)
    for (int core : comm::cores_for_rank(cores_, r.slot, o_.max)) CPU_SET(core, &bind), ++bound;
  const std::size_t threads = std::max<std::size_t>(
      (fixed ? bound : cores_.size() / static_cast<std::size_t>(o_.max)) / static_cast<std::size_t>(o_.ranks), 1);
  const std::string sharing = std::to_string(o_.max);  // (no allocation after fork)
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("cannot start a replica: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (bound > 0) ::sched_setaffinity(0, sizeof bind, &bind);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the front end blocks SIGTERM; a replica must not
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, 1);
    ::setenv("WEFT_SERVE_TOKEN", o_.token.c_str(), 1);
    ::setenv("WEFT_NUM_THREADS", std::to_string(threads).c_str(), 1);
    ::setenv("WEFT_SERVE_REPLICAS", sharing.c_str(), 1);  // (their share of the memory: --kv-cache-memory auto)
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    std::fprintf(stderr, "error: weft serve: cannot run a replica '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  r.pid = pid;
  r.port = 0;
  r.ready = false;
  r.served = false;
}

void ReplicaSet::wait_ready(double timeout_s) {
  std::unique_lock lock(mu_);
  const bool ok = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    int ready = 0;
    for (auto& r : replicas_) ready += r->ready;
    return ready >= o_.min || !start_failure_.empty();
  });
  if (!start_failure_.empty()) throw Error(start_failure_);
  if (!ok) throw Error(fmt::format("the replicas did not start within {:.0f} s", timeout_s));
  starting_ = false;
}

std::unique_ptr<ReplicaSet::Lease> ReplicaSet::acquire(const std::set<int>& exclude, double timeout_s) {
  std::unique_lock lock(mu_);
  Replica* best = nullptr;
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    best = nullptr;
    for (auto& r : replicas_)
      if (r->ready && !r->draining && !exclude.count(r->slot) && (!best || r->outstanding < best->outstanding))
        best = r.get();
    return best != nullptr || stopping_;
  });
  if (!best) return nullptr;
  ++best->outstanding;
  count_outstanding();
  return std::unique_ptr<Lease>(new Lease(*this, best->slot, best->port));
}

void ReplicaSet::suspect(int slot) {
  std::lock_guard lock(mu_);
  for (auto& r : replicas_)
    if (r->slot == slot) r->ready = false;  // until it answers /healthz again
}

std::vector<ReplicaSet::Running> ReplicaSet::running() const {
  std::lock_guard lock(mu_);
  std::vector<Running> out;
  for (const auto& r : replicas_)
    if (r->pid > 0) out.push_back({static_cast<int>(r->pid), r->port, r->ready});
  return out;
}

// A replica that is not ready: its port once written, then a /healthz answer.
void ReplicaSet::poll_ready(Replica& r) {
  if (r.port == 0) {
    if (!file_exists(r.port_file)) return;
    std::string text = read_file(r.port_file);
    while (!text.empty() && (text.back() == '\n')) text.pop_back();
    const auto p = parse_integer(text);
    if (!p) return;
    r.port = static_cast<int>(*p);
  }
  httplib::Client client("127.0.0.1", r.port);
  client.set_connection_timeout(0, 300'000);
  client.set_read_timeout(1);
  auto res = client.Get("/healthz");
  if (res && res->status == 200) {
    if (!r.ready) {
      fmt::print(log_, "weft serve: replica {} (pid {}) ready on 127.0.0.1:{}\n", r.slot, r.pid, r.port);
      std::fflush(log_);
    }
    r.ready = true;
  }
}

void ReplicaSet::monitor() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    for (std::size_t i = 0; i < replicas_.size();) {
      Replica& r = *replicas_[i];
      int status = 0;
      if (r.pid > 0 && ::waitpid(r.pid, &status, WNOHANG) == r.pid) {
        r.pid = -1;
        r.ready = false;
        std::remove(r.port_file.c_str());
        if (r.draining) {
          fmt::print(log_, "weft serve: replica {} stopped ({} left)\n", r.slot, replicas_.size() - 1);
          std::fflush(log_);
          replicas_.erase(replicas_.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        if (!r.served) {  // it never answered: it cannot start
          ++r.failed_starts;
          if (starting_) {
            start_failure_ = fmt::format("replica {} could not start ({}); its error is above", r.slot, exit_reason(status));
            cv_.notify_all();
            ++i;
            continue;
          }
          const double wait = std::min(30.0, static_cast<double>(1 << std::min(r.failed_starts - 1, 5)));
          fmt::print(log_, "weft serve: replica {} could not start ({}); trying again in {:.0f} s\n", r.slot,
                     exit_reason(status), wait);
          std::fflush(log_);
          r.respawn_at = now_s() + wait;
        } else {
          fmt::print(log_, "weft serve: replica {} died ({}); restarting it\n", r.slot, exit_reason(status));
          std::fflush(log_);
          metrics_.add("weft_replica_restarts_total", 1);
          spawn(r);
        }
      }
      if (r.pid < 0 && r.respawn_at >= 0) {
        if (r.draining) {  // scaled down while it waited to be tried again
          replicas_.erase(replicas_.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        if (now_s() >= r.respawn_at) {
          r.respawn_at = -1;
          spawn(r);
        }
      }
      if (r.draining && r.outstanding == 0 && r.pid > 0) ::kill(r.pid, SIGTERM);
      if (!r.ready && !r.draining && r.pid > 0) {
        lock.unlock();  // (a health check may take a moment)
        poll_ready(r);
        lock.lock();
        if (r.ready) {
          r.served = true;
          r.failed_starts = 0;
          cv_.notify_all();
        }
      }
      ++i;
    }
    if (o_.max > o_.min) autoscale(now_s());
    publish();
    monitor_cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
}

void ReplicaSet::autoscale(double now) {
  int ready = 0, serving = 0;
  for (auto& r : replicas_) {
    if (r->draining) continue;
    ++serving;
    ready += r->ready;
  }
  const double load = load_.at(now);
  if (ready < serving || now < quiet_until_) return;  // a change in progress settles first
  const double per = load / ready;
  if (serving < o_.max && per > o_.scale_up_load) {
    int slot = 0;
    for (bool used = true; used; ++slot) {
      used = false;
      for (auto& r : replicas_) used = used || r->slot == slot;
      if (!used) break;
    }
    replicas_.push_back(std::make_unique<Replica>());
    replicas_.back()->slot = slot;
    spawn(*replicas_.back());
    fmt::print(log_, "weft serve: scaling up to {} replica(s): {:.1f} requests outstanding, {:.1f} per replica > {}\n",
               serving + 1, load, per, o_.scale_up_load);
    std::fflush(log_);
    metrics_.add("weft_scaling_events_total", 1, "direction=\"up\"");
    quiet_until_ = now + 1;
    under_since_ = -1;
    return;
  }
  // Down: the load fits in one fewer replica (at half the threshold) for scale_down_after_s.
  if (serving > o_.min && load <= (serving - 1) * o_.scale_up_load / 2) {
    if (under_since_ < 0) under_since_ = now;
    if (now - under_since_ >= o_.scale_down_after_s) {
      Replica* newest = nullptr;
      for (auto& r : replicas_)
        if (!r->draining && (!newest || r->slot > newest->slot)) newest = r.get();
      newest->draining = true;
      count_outstanding();
      fmt::print(log_, "weft serve: scaling down to {} replica(s): {:.1f} requests outstanding for {:.0f} s; draining replica {}\n",
                 serving - 1, load, o_.scale_down_after_s, newest->slot);
      std::fflush(log_);
      metrics_.add("weft_scaling_events_total", 1, "direction=\"down\"");
      under_since_ = -1;
      quiet_until_ = now + 1;
    }
  } else {
    under_since_ = -1;
  }
}

void ReplicaSet::publish() {
  int ready = 0;
  for (auto& r : replicas_) ready += r->ready && !r->draining;
  metrics_.set("weft_replicas", ready);
}

}  // namespace weft::serve
