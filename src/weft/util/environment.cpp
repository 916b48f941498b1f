#include "weft/util/environment.h"

#include <fmt/format.h>

#include "weft/util/flag_table.h"

namespace weft {

namespace {

std::vector<EnvVariable> make_table() {
  std::vector<EnvVariable> t;
  const auto group = [&t](std::string name) {
    return [&t, name](std::string variable, std::string value, std::string help) {
      t.push_back({std::move(variable), name, std::move(value), std::move(help)});
    };
  };
  auto run = group("every command");
  run("WEFT_NUM_THREADS", "1 to 4096", "threads of weft's pool (as weft train --threads); weft launch gives each rank its share of the cores");
  run("WEFT_POOL_SPIN_US", "0 to 1000000",
      "the most microseconds a thread of weft's pool pauses for the next run before it sleeps (weft serve and generate: 100, other commands 0; adaptive)");
  run("WEFT_CPU_ISA", "sse41 | avx2 | avx512_core | avx512_core_vnni | avx512_core_bf16",
      "caps the instruction set weft's kernels and libraries use (oneDNN's names)");
  run("WEFT_CPU_BASELINE", "x86-64-v2 | x86-64-v3 | x86-64-v4 | an instruction set, comma-separated",
      "more the processor must have at start (the check weft makes before main)");
  run("WEFT_KERNELS", "OP=LIBRARY,...", "overrides the kernel table's choice of library per operation (docs/performance.md)");
  run("WEFT_SERVE_TOKEN", "16 characters or more", "weft serve's and serve-bench's bearer token (as --token)");
  auto comm = group("communication");
  comm("WEFT_TRANSPORT", "auto | shm | tcp | mpi", "the transport between ranks (auto: shared memory on one host, TCP across)");
  comm("WEFT_JOB_TOKEN", "a secret", "the job's shared secret every connection proves (required across nodes and for live jobs)");
  comm("WEFT_TLS", "0 | 1", "1: TLS on every TCP connection between ranks");
  comm("WEFT_COMM_TIMEOUT", "seconds", "a collective that waits longer fails naming the operation and the peer (60)");
  comm("WEFT_RENDEZVOUS_TIMEOUT", "seconds", "how long ranks wait for each other at the start (60)");
  comm("WEFT_SPIN_US", "microseconds", "the most a wait spins before it yields (200)");
  comm("WEFT_YIELD_US", "microseconds", "how long a wait yields before it sleeps (2000)");
  comm("WEFT_SHM_RING_BYTES", "a size", "each shared-memory ring's bytes per local peer");
  comm("WEFT_STRIPE", "off | shm+tcp | tcp:N", "stripe large messages over several paths to a peer");
  comm("WEFT_STRIPE_MIN", "a size", "the smallest message striped (1 MiB)");
  comm("WEFT_STRIPE_SHARES", "A:B,...", "the paths' shares of a striped message (default: measured)");
  comm("WEFT_STRIPE_ADDRS", "ADDRESS,...", "a rank's other interfaces' addresses for tcp:N striping");
  comm("WEFT_HOST_ID", "text", "overrides the host's identity that decides which ranks share memory (for tests)");
  comm("WEFT_TRACE", "a folder", "write each rank's communication as trace records (rank-<n>.jsonl) for weft sim");
  for (const char* op : {"ALLREDUCE", "BROADCAST", "REDUCE", "GATHER", "SCATTER", "ALLGATHER", "REDUCE_SCATTER", "ALLTOALL",
                         "BARRIER"})
    comm(fmt::format("WEFT_{}_ALGO", op), "an algorithm of weft comm-bench --list",
         "the algorithm for every size, instead of the selection table's");
  auto test = group("trying heterogeneity on one machine");
  test("WEFT_STRAGGLER", "RANK:MILLISECONDS", "weft train: that rank sleeps this long in every step (a straggler)");
  test("WEFT_SLOWDOWN", "RANK:FACTOR", "weft train: that rank computes FACTOR times slower (a slower device)");
  auto replicas = group("set by weft serve for its replicas");
  replicas("WEFT_SERVE_REPLICAS", "1 to 64",
           "the replicas that may run at once, sharing the machine's memory: --kv-cache-memory auto takes this share of half of it");
  auto launch = group("set by weft launch for its ranks");
  launch("WEFT_RESTART_COUNT", "0, 1, ...", "the attempt (weft launch --max-restarts)");
  launch("WEFT_ELASTIC_STORE", "HOST:PORT", "a live job's membership store");
  launch("WEFT_ELASTIC_JOIN", "1", "the rank joins a live job already running");
  launch("WEFT_PROGRESS_TERMINAL", "1", "rank 0's progress line goes to the launcher's terminal");
  auto own_job = group("set by weft serve, generate and predict for the job they start (--tp, --pp run alone)");
  own_job("WEFT_LOCAL_JOB_OF", "2, 3, ...", "the ranks of the job the command started as itself: a rank that finds no launcher stops");
  return t;
}

}  // namespace

const std::vector<EnvVariable>& environment_variables() {
  static const std::vector<EnvVariable> table = make_table();
  return table;
}

const EnvVariable* find_environment_variable(std::string_view name) {
  for (const EnvVariable& v : environment_variables())
    if (v.name == name) return &v;
  return nullptr;
}

std::string environment_markdown(const std::string& group) {
  std::string md;
  for (const EnvVariable& v : environment_variables()) {
    if (!group.empty() && v.group != group) continue;
    if (md.empty()) md = "| variable | value | meaning |\n|---|---|---|\n";
    md += fmt::format("| `{}` | {} | {} |\n", v.name, markdown_cell(v.value), markdown_cell(v.help));
  }
  return md;
}

}  // namespace weft
