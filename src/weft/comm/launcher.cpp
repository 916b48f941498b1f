#include "weft/comm/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "weft/comm/auth.h"
#include "weft/comm/socket.h"
#include "weft/util/env.h"
#include "weft/util/error.h"

namespace weft::comm {

namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

struct Worker {
  pid_t pid = -1;
  int rank = 0;
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;
  bool running = true;
  int status = 0;
};

int free_port() {
  int port = 0;
  Socket s = listen_tcp("127.0.0.1", 0, &port);
  return port;
}

std::string self_executable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "weft";
  buf[n] = '\0';
  return buf;
}

void flush_lines(std::string& buf, int rank, std::FILE* out, bool all) {
  std::size_t start = 0;
  for (;;) {
    std::size_t nl = buf.find('\n', start);
    if (nl == std::string::npos) break;
    std::fprintf(out, "[%d] %.*s\n", rank, static_cast<int>(nl - start), buf.data() + start);
    start = nl + 1;
  }
  buf.erase(0, start);
  if (all && !buf.empty()) {
    std::fprintf(out, "[%d] %s\n", rank, buf.c_str());
    buf.clear();
  }
  std::fflush(out);
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "exit code " + std::to_string(exit_code(status));
}

// Runs one attempt; returns 0, or the first failing worker's exit code.
int run_attempt(const LaunchConfig& c, const std::string& token, int port, int threads, int attempt,
                int* failed_rank) {
  const int world = c.nproc_per_node * c.nnodes;
  std::vector<Worker> workers(static_cast<size_t>(c.nproc_per_node));
  std::vector<std::string> argv_s = c.command;
  if (argv_s[0] == "weft") argv_s[0] = self_executable();
  for (int l = 0; l < c.nproc_per_node; ++l) {
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      throw Error(std::string("cannot create pipes: ") + std::strerror(errno));
    }
    int rank = c.node_rank * c.nproc_per_node + l;
    pid_t pid = ::fork();
    if (pid < 0) throw Error(std::string("cannot start a worker: ") + std::strerror(errno));
    if (pid == 0) {
      ::setpgid(0, 0);
      ::dup2(out_pipe[1], 1);
      ::dup2(err_pipe[1], 2);
      auto set = [](const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); };
      set("RANK", std::to_string(rank));
      set("WORLD_SIZE", std::to_string(world));
      set("LOCAL_RANK", std::to_string(l));
      set("LOCAL_WORLD_SIZE", std::to_string(c.nproc_per_node));
      set("GROUP_RANK", std::to_string(c.node_rank));
      set("MASTER_ADDR", c.master_addr);
      set("MASTER_PORT", std::to_string(port));
      set("WEFT_JOB_TOKEN", token);
      set("WEFT_NUM_THREADS", std::to_string(threads));
      set("WEFT_RESTART_COUNT", std::to_string(attempt));
      std::vector<char*> argv;
      for (auto& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "error: weft launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    workers[l].pid = pid;
    workers[l].rank = rank;
    workers[l].out_fd = out_pipe[0];
    workers[l].err_fd = err_pipe[0];
  }

  int first_failure = 0;
  int drains = 0;
  bool stopping = false;
  auto stop_start = std::chrono::steady_clock::now();
  auto stop_all = [&](int sig) {
    for (auto& w : workers)
      if (w.running) ::kill(-w.pid, sig);
  };
  for (;;) {
    // Output.
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, bool>> owners;
    for (auto& w : workers) {
      if (w.out_fd >= 0) {
        fds.push_back({w.out_fd, POLLIN, 0});
        owners.emplace_back(&w, false);
      }
      if (w.err_fd >= 0) {
        fds.push_back({w.err_fd, POLLIN, 0});
        owners.emplace_back(&w, true);
      }
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 50);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Worker& w = *owners[i].first;
      bool err = owners[i].second;
      char buf[65536];
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      std::string& acc = err ? w.err_buf : w.out_buf;
      if (n > 0) {
        acc.append(buf, static_cast<size_t>(n));
        flush_lines(acc, w.rank, err ? stderr : stdout, false);
      } else {
        flush_lines(acc, w.rank, err ? stderr : stdout, true);
        ::close(fds[i].fd);
        (err ? w.err_fd : w.out_fd) = -1;
      }
    }
    // Exits.
    for (auto& w : workers) {
      if (!w.running) continue;
      int status = 0;
      if (::waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.running = false;
        w.status = status;
        if (exit_code(status) != 0 && first_failure == 0 && !stopping) {
          first_failure = exit_code(status);
          *failed_rank = w.rank;
          std::fprintf(stderr, "weft launch: rank %d failed (%s); stopping the other ranks\n", w.rank,
                       describe(status).c_str());
          stopping = true;
          stop_start = std::chrono::steady_clock::now();
          stop_all(SIGTERM);
        }
      }
    }
    if (g_signal != 0 && !stopping) {
      stopping = true;
      stop_start = std::chrono::steady_clock::now();
      stop_all(g_signal);
      first_failure = 128 + g_signal;
      *failed_rank = -1;
    }
    if (stopping && std::chrono::duration<double>(std::chrono::steady_clock::now() - stop_start).count() > c.grace_s) {
      stop_all(SIGKILL);
    }
    bool any_running = false, any_output = false;
    for (auto& w : workers) {
      any_running = any_running || w.running;
      any_output = any_output || w.out_fd >= 0 || w.err_fd >= 0;
    }
    if (!any_running && !any_output) break;
    if (!any_running && any_output) {
      // Grandchildren may hold the pipes open; do not wait for them forever.
      if (++drains > 40) {
        for (auto& w : workers) {
          if (w.out_fd >= 0) ::close(w.out_fd);
          if (w.err_fd >= 0) ::close(w.err_fd);
          w.out_fd = w.err_fd = -1;
        }
      }
    }
  }
  return first_failure;
}

}  // namespace

int launch(const LaunchConfig& c) {
  if (c.nproc_per_node < 1) throw ConfigError("--nproc-per-node must be at least 1");
  if (c.nnodes < 1) throw ConfigError("--nnodes must be at least 1");
  if (c.node_rank < 0 || c.node_rank >= c.nnodes) {
    throw ConfigError("--node-rank " + std::to_string(c.node_rank) + " is outside 0.." + std::to_string(c.nnodes - 1));
  }
  if (c.master_port < 0 || c.master_port > 65535) throw ConfigError("--master-port must be in 0..65535");
  if (c.max_restarts < 0) throw ConfigError("--max-restarts must be >= 0");
  if (c.command.empty()) throw ConfigError("no command to launch (weft launch [options] -- command ...)");

  std::string token;
  if (auto t = env_string("WEFT_JOB_TOKEN")) {
    token = job_token_from_env();
  } else if (c.nnodes > 1) {
    throw ConfigError("a job on several nodes needs WEFT_JOB_TOKEN: export the same secret on every node "
                      "(e.g. WEFT_JOB_TOKEN=$(openssl rand -hex 32))");
  } else {
    token = generate_token();
  }
  int threads = 0;
  if (auto t = env_positive_int("WEFT_NUM_THREADS")) {
    threads = *t;
  } else {
    long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
    threads = std::max(1, static_cast<int>(cores) / c.nproc_per_node);
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  for (int attempt = 0;; ++attempt) {
    int port = c.master_port != 0 ? c.master_port : (c.nnodes == 1 ? free_port() : 29500);
    int failed_rank = -1;
    int code = run_attempt(c, token, port, threads, attempt, &failed_rank);
    if (code == 0) return 0;
    if (g_signal != 0) return 128 + g_signal;
    if (attempt >= c.max_restarts) return code;
    std::fprintf(stderr, "weft launch: restarting all ranks (restart %d of %d)\n", attempt + 1, c.max_restarts);
  }
}

}  // namespace weft::comm
