#include "weft/comm/process.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "weft/util/env.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::comm {

namespace {
std::optional<int> env_int(const char* name, int lo, int hi) {
  auto s = env_string(name);
  if (!s) return std::nullopt;
  char* end = nullptr;
  long v = std::strtol(s->c_str(), &end, 10);
  if (end == s->c_str() || *end != '\0' || v < lo || v > hi) {
    throw ConfigError(std::string(name) + "='" + *s + "' is not an integer in " + std::to_string(lo) + ".." +
                      std::to_string(hi));
  }
  return static_cast<int>(v);
}
}  // namespace

std::string first_slurm_host(const std::string& list) {
  std::string first;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    first.push_back(c);
  }
  auto open = first.find('[');
  if (open == std::string::npos) return first;
  std::string prefix = first.substr(0, open);
  std::string range = first.substr(open + 1);
  auto stop = range.find_first_of(",-]");
  return prefix + range.substr(0, stop);
}

ProcessInfo process_info_from_env() {
  ProcessInfo p;
  constexpr int kMax = 1 << 20;
  if (auto w = env_int("WORLD_SIZE", 1, kMax)) {
    p.launcher = "weft";
    p.world = *w;
    p.rank = env_int("RANK", 0, kMax).value_or(0);
    p.local_rank = env_int("LOCAL_RANK", 0, kMax).value_or(p.rank);
    p.local_world = env_int("LOCAL_WORLD_SIZE", 1, kMax).value_or(p.world);
  } else if (auto ow = env_int("OMPI_COMM_WORLD_SIZE", 1, kMax)) {
    p.launcher = "mpirun";
    p.world = *ow;
    p.rank = env_int("OMPI_COMM_WORLD_RANK", 0, kMax).value_or(0);
    p.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, kMax).value_or(p.rank);
    p.local_world = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMax).value_or(p.world);
  } else if (auto pw = env_int("PMI_SIZE", 1, kMax)) {
    p.launcher = "mpirun";
    p.world = *pw;
    p.rank = env_int("PMI_RANK", 0, kMax).value_or(0);
    p.local_rank = env_int("MPI_LOCALRANKID", 0, kMax).value_or(p.rank);
    p.local_world = env_int("MPI_LOCALNRANKS", 1, kMax).value_or(p.world);
  } else if (auto sw = env_int("SLURM_NTASKS", 1, kMax)) {
    p.launcher = "slurm";
    p.world = *sw;
    p.rank = env_int("SLURM_PROCID", 0, kMax).value_or(0);
    p.local_rank = env_int("SLURM_LOCALID", 0, kMax).value_or(0);
    p.local_world = env_int("SLURM_NTASKS_PER_NODE", 1, kMax).value_or(1);
    if (auto nodes = env_string("SLURM_STEP_NODELIST")) p.master_addr = first_slurm_host(*nodes);
    else if (auto nodes2 = env_string("SLURM_JOB_NODELIST")) p.master_addr = first_slurm_host(*nodes2);
    if (auto job = env_int("SLURM_JOB_ID", 0, 2147483647)) p.master_port = 20000 + *job % 20000;
  }
  if (auto a = env_string("MASTER_ADDR")) p.master_addr = *a;
  if (auto port = env_int("MASTER_PORT", 1, 65535)) p.master_port = *port;
  if (p.rank >= p.world) {
    throw ConfigError("rank " + std::to_string(p.rank) + " is outside the world of " + std::to_string(p.world));
  }
  if (p.local_rank >= p.local_world) {
    throw ConfigError("local rank " + std::to_string(p.local_rank) + " is outside the local world of " +
                      std::to_string(p.local_world));
  }
  return p;
}

// The cores local rank `local` of `nproc` is bound to, out of `cores` (the launcher's own,
// in order): a contiguous block of cores/nproc when there are enough, else core local % cores
// (ranks that share a core alternate, as mpirun --map-by core places them).
std::vector<int> cores_for_rank(const std::vector<int>& cores, int local, int nproc) {
  const int m = static_cast<int>(cores.size());
  if (m == 0 || nproc < 1) return {};
  if (nproc > m) return {cores[static_cast<std::size_t>(local % m)]};
  std::vector<int> mine;
  for (int i = local * m / nproc; i < (local + 1) * m / nproc; ++i) mine.push_back(cores[static_cast<std::size_t>(i)]);
  return mine;
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "weft";
  buf[n] = '\0';
  return buf;
}

std::vector<std::string> local_job_command(int ranks, const std::vector<std::string>& launch_flags,
                                           const std::vector<std::string>& command) {
  std::vector<std::string> args = {self_executable(), "launch", "--nproc-per-node", std::to_string(ranks)};
  args.insert(args.end(), launch_flags.begin(), launch_flags.end());
  args.insert(args.end(), {"--", self_executable()});
  if (!command.empty()) args.insert(args.end(), command.begin() + 1, command.end());
  return args;
}

void exec_as_local_job(int ranks) {
  WEFT_CHECK(ranks >= 2, "exec_as_local_job: a job of one rank");
  // (A rank of that job that found no launcher in its environment would start a job again,
  // and so on: refused instead.)
  WEFT_CHECK(!env_string("WEFT_LOCAL_JOB_OF"), "exec_as_local_job: a rank of a job this command started has no launcher");
  ::setenv("WEFT_LOCAL_JOB_OF", std::to_string(ranks).c_str(), 1);
  const std::string line = read_file("/proc/self/cmdline");  // (the arguments, each ended by a NUL)
  std::vector<std::string> command;
  for (std::size_t at = 0; at < line.size();) {
    const std::size_t end = std::min(line.find('\0', at), line.size());
    command.push_back(line.substr(at, end - at));
    at = end + 1;
  }
  if (command.empty()) throw Error("cannot read this command's own arguments from /proc/self/cmdline");
  std::vector<std::string> args = local_job_command(ranks, {"--no-prefix", "--stop-status", "ranks"}, command);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execv(argv[0], argv.data());
  throw Error("cannot start weft launch (" + args[0] + "): " + std::strerror(errno));
}

std::vector<std::string> own_file_candidates(const std::string& name) {
  const std::string exe = self_executable();
  const std::string dir = exe.substr(0, exe.rfind('/') + 1);
  return {dir + name, dir + WEFT_BIN_TO_OWN_FILES "/" + name};
}

std::vector<int> allowed_cores() {
  std::vector<int> cores;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int i = 0; i < CPU_SETSIZE; ++i)
      if (CPU_ISSET(i, &set)) cores.push_back(i);
  }
  if (cores.empty()) {
    for (long i = 0; i < ::sysconf(_SC_NPROCESSORS_ONLN); ++i) cores.push_back(static_cast<int>(i));
  }
  return cores;
}

}  // namespace weft::comm
