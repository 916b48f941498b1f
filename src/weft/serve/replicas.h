// Data-parallel serving (seed 003 chapter 3: replicas of the whole model, inputs split among
// them, no communication between them) and elastic serving (chapter 11: the number of
// replicas follows the load). A ReplicaSet runs `weft serve` replica processes on loopback
// ports, each bound to its share of the cores when their number is fixed (a replica split
// over several ranks, --tp x --pp: a `weft launch` job of them, on that share), and:
//   - hands out the live replica with the least outstanding requests (acquire);
//   - restarts a replica that dies (its in-flight requests are retried by the front end); one
//     that dies before it ever answered could not start (a missing model file, say: its own
//     error is in the log): as the set starts, wait_ready fails with that at once; later it
//     is tried again after 1 s, doubled at each failure in a row up to 30 s;
//   - with min < max, adds a replica when the outstanding requests per replica (averaged over
//     about a second) exceed scale_up_load, and drains and stops the newest when the load
//     would fit in one fewer for scale_down_after_s.
// Every change is logged with its reason and counted in the metrics.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "weft/serve/metrics.h"
#include "weft/util/stats.h"

namespace weft::serve {

struct ReplicaOptions {
  int min = 1, max = 1;
  std::vector<std::string> command;  // weft serve MODEL ... without --host/--port/--port-file
  int ranks = 1;                     // each replica's ranks (--tp x --pp), started by weft launch
  std::string token;                 // the replicas' internal bearer token (given by environment)
  std::string folder;                // where the replicas write their port files
  double scale_up_load = 8;          // outstanding requests per replica that add a replica
  double scale_down_after_s = 3;     // how long the load must fit in one fewer replica
};

class ReplicaSet {
 public:
  ReplicaSet(ReplicaOptions options, std::FILE* log, Metrics& metrics);
  ~ReplicaSet();  // stops every replica

  // Blocks until `min` replicas answer (throws Error if one cannot start).
  void wait_ready(double timeout_s);

  // A replica to send one request to; released when the lease goes.
  class Lease {
   public:
    ~Lease();
    int slot() const { return slot_; }
    int port() const { return port_; }

   private:
    friend class ReplicaSet;
    Lease(ReplicaSet& set, int slot, int port) : set_(set), slot_(slot), port_(port) {}
    ReplicaSet& set_;
    int slot_, port_;
  };
  // The ready replica with the least outstanding requests, not in `exclude`; waits up to
  // `timeout_s` for one (a restart in progress); null when none.
  std::unique_ptr<Lease> acquire(const std::set<int>& exclude, double timeout_s);
  // The front end reports a replica that failed a request (it may have died).
  void suspect(int slot);
  // Every replica process running: its pid, its port (0: not known yet), whether it answers.
  struct Running {
    int pid = 0, port = 0;
    bool ready = false;
  };
  std::vector<Running> running() const;

 private:
  struct Replica {
    int slot = 0;
    pid_t pid = -1;
    int port = 0;
    std::string port_file;
    bool ready = false, draining = false;
    bool served = false;      // this process answered once: a death before that is a failed start
    int failed_starts = 0;    // in a row
    double respawn_at = -1;   // a failed start is tried again then (-1: not waiting)
    std::int64_t outstanding = 0;
  };
  void spawn(Replica& r);
  void monitor();
  void poll_ready(Replica& r);
  void autoscale(double now);
  void publish();
  void count_outstanding();  // under the lock, after a change of a serving replica's count

  ReplicaOptions o_;
  std::FILE* log_;
  Metrics& metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;          // a replica became ready, or the set stops
  std::condition_variable monitor_cv_;  // the set stops (a lease's end must not wake the monitor)
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<int> cores_;
  std::int64_t spawned_ = 0;  // replica processes started: each writes a port file of its own
  bool stopping_ = false;
  bool starting_ = true;        // until wait_ready saw MIN replicas answer
  std::string start_failure_;  // a replica that could not start while starting_
  TimeAverage load_{1.0};  // serving replicas' outstanding requests, averaged over ~1 s
  double quiet_until_ = -1, under_since_ = -1;
  std::thread monitor_;
};

}  // namespace weft::serve
