#include "weft/comm/launcher.h"

#include <fcntl.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <cerrno>
#include <chrono>
#include <deque>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include "weft/comm/auth.h"
#include "weft/comm/links.h"
#include "weft/comm/membership.h"
#include "weft/comm/process.h"
#include "weft/comm/socket.h"
#include "weft/comm/store.h"
#include "weft/util/env.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::comm {

namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

// Where a rank's lines go: the console (with or without "[rank] "), a log file, or both.
struct Sink {
  std::FILE* console = nullptr;
  std::FILE* file = nullptr;
  bool prefix = true;
};

struct Worker {
  pid_t pid = -1;
  int rank = 0;
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;
  Sink out, err;
  bool running = true;
  int status = 0;
  Worker() = default;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() {
    for (std::FILE* f : {out.file, err.file})
      if (f) std::fclose(f);
  }
};

// A port for a single-node job's store, free now and closed again before rank 0 binds it.
// It is picked at random below the kernel's ephemeral range (ip_local_port_range), where the
// kernel gives no port to another program's connection or port-0 listener in the meantime
// (a kernel-chosen port was once taken so under a busy test suite, and the ranks were
// refused); a port in use is passed over. The kernel's choice when none is found.
int free_port() {
  int ephemeral_lo = 32768;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    int lo = 0, hi = 0;
    if (std::fscanf(f, "%d %d", &lo, &hi) == 2 && lo > 2048) ephemeral_lo = lo;
    std::fclose(f);
  }
  const int span = std::min(10000, ephemeral_lo - 1024);
  std::mt19937 rng(std::random_device{}());
  const int start = static_cast<int>(rng() % static_cast<unsigned>(span));
  for (int i = 0; i < 64; ++i) {
    const int port = ephemeral_lo - span + (start + i * 7919) % span;
    try {
      int bound = 0;
      Socket s = listen_tcp("127.0.0.1", port, &bound);
      return bound;
    } catch (const CommError&) {  // in use: the next
    }
  }
  int port = 0;
  Socket s = listen_tcp("127.0.0.1", 0, &port);
  return port;
}

// Rank 0's progress line when the launcher's stderr is a terminal: rank 0 draws it in place
// (WEFT_PROGRESS_TERMINAL=1: "\r\033[K" and the line, no newline), and the launcher keeps it
// as the terminal's last line, below every other line of every rank.
struct TerminalLine {
  bool tty = false;   // the launcher's stderr is a terminal
  bool open = false;  // a progress line is on screen
  std::string text;
};
TerminalLine g_line;

std::string without_clears(std::string s) {
  for (std::size_t at; (at = s.find("\033[K")) != std::string::npos;) s.erase(at, 3);
  return s;
}

void clear_progress() {
  if (!g_line.open) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
}

void draw_progress() {
  if (!g_line.open) return;
  std::fprintf(stderr, "[0] %s", g_line.text.c_str());
  std::fflush(stderr);
}

void print_line(const Sink& sink, int rank, const char* text, std::size_t n) {
  if (sink.file) std::fprintf(sink.file, "%.*s\n", static_cast<int>(n), text);
  if (!sink.console) return;
  clear_progress();
  if (sink.prefix) std::fprintf(sink.console, "[%d] ", rank);
  std::fprintf(sink.console, "%.*s\n", static_cast<int>(n), text);
  std::fflush(sink.console);
  draw_progress();
}

// Prints the complete lines of `buf` to `out` (all: the rest too); `progress`:
// the buffer is rank 0's stderr on a terminal, where text after a "\r" is its progress line.
void flush_lines(std::string& buf, int rank, const Sink& out, bool all, bool progress) {
  std::size_t start = 0;
  for (;;) {
    std::size_t nl = buf.find('\n', start);
    if (nl == std::string::npos) break;
    std::string line = buf.substr(start, nl - start);
    start = nl + 1;
    const std::size_t cr = progress ? line.rfind('\r') : std::string::npos;
    if (cr != std::string::npos) {  // the progress line ends here
      clear_progress();
      g_line.open = false;
      line = without_clears(line.substr(cr + 1));
      if (line.empty()) continue;
    }
    print_line(out, rank, line.data(), line.size());
  }
  buf.erase(0, start);
  const std::size_t cr = progress ? buf.rfind('\r') : std::string::npos;
  if (cr != std::string::npos) {  // a new state of the progress line
    clear_progress();
    g_line.text = without_clears(buf.substr(cr + 1));
    g_line.open = !g_line.text.empty();
    draw_progress();
    buf.clear();
  }
  if (all && !buf.empty()) {
    print_line(out, rank, buf.data(), buf.size());
    buf.clear();
  }
  if (all && progress) {
    clear_progress();
    g_line.open = false;
  }
  if (out.file) std::fflush(out.file);
}

// Shared-memory segments a rank created and did not unlink (it died during rendezvous):
// their names end in "-p<pid>" (links.cpp).
void remove_segments_of(pid_t pid) {
  const std::string suffix = "-p" + std::to_string(pid);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("weft-", 0) == 0 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      ::shm_unlink(("/" + name).c_str());
  }
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

// The folder holding the weft_torch package (the torch.distributed backend) and the
// sitecustomize that registers it: next to the weft binary in a build tree, under the
// library folder once installed; empty when neither exists.
std::string python_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const fs::path dir : own_file_candidates("python"))
    if (fs::exists(dir / "weft_torch", ec)) return fs::weakly_canonical(dir, ec).string();
  return "";
}

// The command a rank runs: `weft` is this binary; a .py script or a module runs with python3.
std::vector<std::string> command_line(const LaunchConfig& c) {
  std::vector<std::string> argv = c.command;
  if (argv[0] == "weft") argv[0] = self_executable();
  const std::string& first = argv[0];
  const bool script = first.size() > 3 && first.compare(first.size() - 3, 3, ".py") == 0;
  if (c.module) argv.insert(argv.begin(), {c.python, "-m"});
  else if (!c.python.empty() && script) argv.insert(argv.begin(), c.python);
  return argv;
}

// Local rank `l`'s streams that --redirects or --tee send to files, opened in
// attempt_N/l/ of the run's log folder (c.log_dir after with_log_folder: torchrun's layout);
// redirected ones leave the console.
void open_logs(Worker& w, const LaunchConfig& c, int attempt, int l) {
  const auto code = [l](const std::vector<int>& per_rank) {
    return l < static_cast<int>(per_rank.size()) ? per_rank[static_cast<size_t>(l)] : 0;
  };
  const int redirect = code(c.redirects), tee = code(c.tee);
  if ((redirect | tee) == 0) return;
  const std::filesystem::path dir =
      std::filesystem::path(c.log_dir) / ("attempt_" + std::to_string(attempt)) / std::to_string(l);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw ConfigError("--log-dir: cannot create " + dir.string() + ": " + ec.message());
  auto open_log = [&](const char* name) {
    std::FILE* f = std::fopen((dir / name).c_str(), "we");  // not inherited by the ranks
    if (!f) throw ConfigError("--log-dir: cannot write " + (dir / name).string() + ": " + std::strerror(errno));
    return f;
  };
  if ((redirect | tee) & 1) w.out.file = open_log("stdout.log");
  if ((redirect | tee) & 2) w.err.file = open_log("stderr.log");
  if (redirect & 1) w.out.console = nullptr;
  if (redirect & 2) w.err.console = nullptr;
}

// Runs one attempt; returns 0, or the first failing worker's exit code. (`c` carries this
// attempt's node count, node rank and master address.)
int run_attempt(const LaunchConfig& c, const std::string& token, int port, int threads, int attempt,
                int* failed_rank) {
  const int world = c.nproc_per_node * c.nnodes;
  const int most = std::max(c.nproc_per_node, c.max_nproc);  // local ranks at once (live: spares too)
  std::deque<Worker> workers;
  const std::vector<int> cores = allowed_cores();  // the launcher's own, shared out below
  const std::vector<std::string> argv_s = command_line(c);
  const bool prefix = c.prefix && world > 1;
  const std::string threads_s = std::to_string(threads);
  std::string pythonpath = python_dir();
  if (const char* old = std::getenv("PYTHONPATH"); old && *old)
    pythonpath = pythonpath.empty() ? old : pythonpath + ":" + old;
  // Starts local rank `l` (a live job's spare: a joiner).
  auto start_worker = [&](int l, bool joiner) {
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      throw Error(std::string("cannot create pipes: ") + std::strerror(errno));
    }
    int rank = c.node_rank * c.nproc_per_node + l;
    // A spare a live job asked for: its launch rank only names it (the job gives it its rank).
    const int launch_world = joiner ? std::max(world, rank + 1) : world;
    const int local_world = joiner ? most : c.nproc_per_node;
    Worker& wk = workers.emplace_back();
    wk.out = {stdout, nullptr, prefix};
    wk.err = {stderr, nullptr, prefix};
    open_logs(wk, c, attempt, l);
    // Built before fork: the child only makes the system call.
    cpu_set_t bind_set;
    CPU_ZERO(&bind_set);
    if (c.bind == "cores")
      for (int core : cores_for_rank(cores, l, most)) CPU_SET(core, &bind_set);
    const pid_t launcher = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) throw Error(std::string("cannot start a worker: ") + std::strerror(errno));
    if (pid == 0) {
      ::setpgid(0, 0);
      // A worker outlives no launcher: one killed (SIGKILL: nothing of it runs to stop the
      // workers) sends its workers SIGTERM, as a stopping launcher does; one already gone
      // before this line, the worker does not start.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != launcher) ::_exit(128 + SIGTERM);
      if (c.bind == "cores") ::sched_setaffinity(0, sizeof bind_set, &bind_set);
      ::dup2(out_pipe[1], 1);
      ::dup2(err_pipe[1], 2);
      auto set = [](const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); };
      set("RANK", std::to_string(rank));
      set("WORLD_SIZE", std::to_string(launch_world));
      set("LOCAL_RANK", std::to_string(l));
      set("LOCAL_WORLD_SIZE", std::to_string(local_world));
      set("GROUP_RANK", std::to_string(c.node_rank));
      set("MASTER_ADDR", c.master_addr);
      set("MASTER_PORT", std::to_string(port));
      set("WEFT_JOB_TOKEN", token);
      set("WEFT_NUM_THREADS", threads_s);
      set("WEFT_RESTART_COUNT", std::to_string(attempt));
      // What a torchrun child sees (torch.distributed.run), for scripts written for it.
      set("GROUP_WORLD_SIZE", std::to_string(c.nnodes));
      set("ROLE_RANK", std::to_string(rank));
      set("ROLE_WORLD_SIZE", std::to_string(launch_world));
      set("ROLE_NAME", c.role);
      set("TORCHELASTIC_RESTART_COUNT", std::to_string(attempt));
      set("TORCHELASTIC_MAX_RESTARTS", std::to_string(c.max_restarts));
      set("TORCHELASTIC_RUN_ID", c.run_id);
      set("TORCHELASTIC_USE_AGENT_STORE", "False");  // rank 0 serves torch's store itself
      if (!std::getenv("OMP_NUM_THREADS")) set("OMP_NUM_THREADS", threads_s);
      if (!pythonpath.empty()) set("PYTHONPATH", pythonpath);  // init_process_group("weft")
      if (!c.live_store.empty()) set("WEFT_ELASTIC_STORE", c.live_store);
      if (!c.join.empty() || joiner) set("WEFT_ELASTIC_JOIN", "1");
      if (rank == 0 && g_line.tty && wk.err.console) set("WEFT_PROGRESS_TERMINAL", "1");  // rank 0 owns the terminal
      std::vector<char*> argv;
      for (auto& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "error: weft launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    wk.pid = pid;
    wk.rank = rank;
    wk.out_fd = out_pipe[0];
    wk.err_fd = err_pipe[0];
  };
  for (int l = 0; l < c.nproc_per_node; ++l) start_worker(l, false);
  // A live job with spare places (--nproc-per-node MIN:MAX): ranks the job asks for
  // (live/requested, by rank 0) are started here while places are free, each launcher
  // claiming one request at a time (live/spawned).
  std::unique_ptr<StoreClient> live;
  if (!c.live_store.empty() && c.max_nproc > c.nproc_per_node) {
    const auto [host, live_port] = parse_host_port(c.live_store, "the live job's store");
    live = std::make_unique<StoreClient>(host, live_port, token, static_cast<std::uint32_t>(3000 + c.node_rank), 60);
  }
  auto last_look = std::chrono::steady_clock::now();
  bool live_done = false;
  auto start_requested = [&] {
    if (!live || live_done || std::chrono::steady_clock::now() - last_look < std::chrono::milliseconds(100)) return;
    last_look = std::chrono::steady_clock::now();
    try {
      live_done = live->check("live/done");
      int running = 0;
      for (auto& w : workers) running += w.running ? 1 : 0;
      while (!live_done && running < most && live->add("live/spawned", 0) < live->add("live/requested", 0)) {
        if (live->add("live/spawned", 1) > live->add("live/requested", 0)) {  // another launcher was first
          live->add("live/spawned", -1);
          break;
        }
        start_worker(static_cast<int>(workers.size()), true);
        ++running;
      }
    } catch (const std::exception&) {
      live_done = true;  // the job's store is gone: the job is over
    }
  };

  int first_failure = 0;
  int live_failure = 0;  // the first rank of a live job that died (the job went on)
  int drains = 0;
  // Stopping after a failure: the others get kSettleS to end by themselves first (a peer
  // of the failed rank usually fails at once, and its message is often the one that
  // explains; a SIGTERM would cut it off), then SIGTERM, then SIGKILL after grace_s.
  constexpr double kSettleS = 1.0;
  bool stopping = false, terminated = false;
  auto stop_start = std::chrono::steady_clock::now();
  // A stopped rank (SIGSTOP, a shell's Ctrl-Z) acts on a signal only once continued: SIGCONT
  // after it, as a shell's kill does, so that it ends now rather than at the SIGKILL.
  auto stop_all = [&](int sig) {
    for (auto& w : workers) {
      if (!w.running) continue;
      ::kill(-w.pid, sig);
      if (sig != SIGKILL) ::kill(-w.pid, SIGCONT);
    }
  };
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  for (;;) {
    if (!stopping) start_requested();
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
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;  // a signal (the rank's output is still open)
      std::string& acc = err ? w.err_buf : w.out_buf;
      const Sink& sink = err ? w.err : w.out;
      const bool progress = err && w.rank == 0 && g_line.tty && sink.console;
      if (n > 0) {
        acc.append(buf, static_cast<size_t>(n));
        flush_lines(acc, w.rank, sink, false, progress);
      } else {
        flush_lines(acc, w.rank, sink, true, progress);
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
        remove_segments_of(w.pid);
        // Exit code 2 is a usage error (a flag or a configuration refused): every rank runs
        // the same command, so none could go on.
        const bool usage_error = exit_code(status) == 2;
        if (exit_code(status) != 0 && !usage_error && !c.live_store.empty() && !stopping && g_signal == 0) {
          // A live job goes on without a rank that died (its survivors form the next
          // generation): the launcher keeps the others running.
          if (live_failure == 0) live_failure = exit_code(status);
          clear_progress();
          g_line.open = false;
          std::fprintf(stderr, "weft launch: rank %d failed (%s); the live job goes on without it\n", w.rank,
                       describe(status).c_str());
        } else if (exit_code(status) != 0 && first_failure == 0 && !stopping) {
          first_failure = exit_code(status);
          *failed_rank = w.rank;
          clear_progress();
          g_line.open = false;
          std::fprintf(stderr, "weft launch: rank %d failed (%s); stopping the other ranks\n", w.rank,
                       describe(status).c_str());
          stopping = true;
          stop_start = std::chrono::steady_clock::now();
        }
      }
    }
    if (g_signal != 0 && !terminated) {
      stopping = terminated = true;
      stop_start = std::chrono::steady_clock::now();
      stop_all(g_signal);
      if (first_failure == 0 && c.stop_status == "signal") {
        first_failure = 128 + g_signal;
        *failed_rank = -1;
      }
    }
    if (stopping && !terminated && seconds_since(stop_start) > kSettleS) {
      terminated = true;
      stop_start = std::chrono::steady_clock::now();
      stop_all(SIGTERM);
    }
    if (terminated && seconds_since(stop_start) > c.grace_s) stop_all(SIGKILL);
    bool any_running = false, any_output = false;
    for (auto& w : workers) {
      any_running = any_running || w.running;
      any_output = any_output || w.out_fd >= 0 || w.err_fd >= 0;
    }
    const bool spares = live && !live_done && !stopping && g_signal == 0;  // places the job may still ask for
    if (!any_running && !any_output && !spares) break;
    if (fds.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
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
  if (first_failure == 0 && g_signal != 0 && c.stop_status == "ranks") {
    // Stopped by a signal, the ranks' own status: the first rank's that did not end cleanly.
    for (const Worker& w : workers)
      if (exit_code(w.status) != 0) return exit_code(w.status);
    return 0;
  }
  if (first_failure == 0 && live_failure != 0) {
    // A live job's rank died and the job went on: a failure here only if none of this
    // launcher's ranks ended well.
    const bool any_ok = std::any_of(workers.begin(), workers.end(), [](const Worker& w) { return exit_code(w.status) == 0; });
    if (!any_ok) return live_failure;
  }
  return first_failure;
}

void validate(const LaunchConfig& c) {
  const bool live = c.elastic || !c.join.empty();
  if (c.max_nproc > 0 && !live)
    throw ConfigError("--nproc-per-node MIN:MAX (places a live job may grow into) needs --elastic or --join");
  if (c.max_nproc > 0 && c.max_nproc < c.nproc_per_node)
    throw ConfigError("--nproc-per-node MIN:MAX needs MIN <= MAX");
  if (c.nproc_per_node < (c.join.empty() ? 1 : 0) || (c.nproc_per_node == 0 && c.max_nproc < 1))
    throw ConfigError("--nproc-per-node must be at least 1 (a launcher that joins a live job: 0:MAX offers places only)");
  if (c.nnodes < 1) throw ConfigError("--nnodes must be at least 1");
  if (c.min_nodes < 0 || c.min_nodes > c.nnodes)
    throw ConfigError("--nnodes MIN:MAX needs 1 <= MIN <= MAX, got " + std::to_string(c.min_nodes) + ":" + std::to_string(c.nnodes));
  if (!(c.join_timeout_s > 0)) throw ConfigError("--join-timeout must be positive");
  if (c.node_rank < 0 || c.node_rank >= c.nnodes) {
    throw ConfigError("--node-rank " + std::to_string(c.node_rank) + " is outside 0.." + std::to_string(c.nnodes - 1));
  }
  if (c.master_port < 0 || c.master_port > 65535) throw ConfigError("--master-port must be in 0..65535");
  if (c.max_restarts < 0) throw ConfigError("--max-restarts must be >= 0");
  if (c.bind != "cores" && c.bind != "none") throw ConfigError("--bind '" + c.bind + "' is not cores or none");
  if (c.command.empty()) throw ConfigError("no command to launch (weft launch [options] -- command ...)");
  if (!c.join.empty()) parse_host_port(c.join, "--join");
  if (c.elastic && !c.join.empty()) throw ConfigError("--elastic starts a live job and --join joins one: give one of them");
  if ((c.elastic || !c.join.empty()) && (c.nnodes > 1 || c.max_restarts > 0))
    throw ConfigError("a live job (--elastic, --join) changes its ranks without restarts: leave out --nnodes and "
                      "--max-restarts (other nodes join with --join)");
  if ((c.elastic || !c.join.empty()) && !env_string("WEFT_JOB_TOKEN"))
    throw ConfigError("a live job (--elastic, --join) needs WEFT_JOB_TOKEN: the launchers that join it prove the same "
                      "secret (e.g. export WEFT_JOB_TOKEN=$(openssl rand -hex 32))");
  if (c.run_id.empty() || c.run_id == "." || c.run_id == ".." ||
      c.run_id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != std::string::npos)
    throw ConfigError("--rdzv-id '" + c.run_id + "': use letters, digits, '.', '_' and '-' (it names the log folder)");
}

// The run's own log folder, new for every launch as torchrun makes it: log_dir/RUN_ID_XXXXXX
// (log_dir itself a new temporary folder without --log-dir), so that a launch again with the
// same --rdzv-id, or another node's launcher writing into the same shared folder, replaces no
// earlier logs. The returned config's log_dir is that folder; it is named on stderr.
LaunchConfig with_log_folder(LaunchConfig c) {
  if (!writes_rank_logs(c)) return c;
  const auto new_folder = [](std::string tmpl) {
    if (!::mkdtemp(tmpl.data())) throw Error("cannot create the log folder " + tmpl + ": " + std::strerror(errno));
    return tmpl;
  };
  if (c.log_dir.empty()) c.log_dir = new_folder((std::filesystem::temp_directory_path() / "weft-launch-XXXXXX").string());
  make_directories(c.log_dir);
  c.log_dir = new_folder((std::filesystem::path(c.log_dir) / (c.run_id + "_XXXXXX")).string());
  std::fprintf(stderr, "weft launch: ranks' logs in %s\n", c.log_dir.c_str());
  return c;
}

}  // namespace

bool writes_rank_logs(const LaunchConfig& c) {
  const auto any = [](const std::vector<int>& codes) { return std::any_of(codes.begin(), codes.end(), [](int v) { return v != 0; }); };
  return any(c.redirects) || any(c.tee);
}

int launch(const LaunchConfig& config) {
  validate(config);
  g_line.tty = ::isatty(2) != 0;
  const LaunchConfig c = with_log_folder(config);
  std::string token;
  if (auto t = env_string("WEFT_JOB_TOKEN")) {
    token = job_token_from_env();
    // A guessable token lets anyone who can reach the job's ports join it (docs/communication.md).
    if (const double bits = token_strength_bits(token); bits < kMinTokenBits)
      std::fprintf(stderr,
                   "weft launch: warning: WEFT_JOB_TOKEN holds about %.0f bits of entropy, below %.0f: a stranger who "
                   "records one handshake can guess it offline; use e.g. WEFT_JOB_TOKEN=$(openssl rand -hex 32)\n",
                   bits, kMinTokenBits);
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
    threads = std::max(1, static_cast<int>(allowed_cores().size()) / std::max({1, c.nproc_per_node, c.max_nproc}));
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  // Live: this launcher keeps the store of the job's generations for its whole life.
  std::unique_ptr<StoreServer> live_server;
  LaunchConfig live = c;
  if (c.elastic) {
    live_server = std::make_unique<StoreServer>(bind_address_for(c.master_addr), c.master_port, token);
    live.live_store = c.master_addr + ":" + std::to_string(live_server->port());
    std::fprintf(stderr, "weft launch: a live job: add ranks with weft launch --join %s --nproc-per-node N -- <the same "
                         "command>\n", live.live_store.c_str());
  } else if (!c.join.empty()) {
    live.live_store = c.join;
  }
  // Elastic: node 0's launcher keeps the membership store for the whole job.
  const bool elastic = c.min_nodes > 0 && c.min_nodes < c.nnodes;
  const int agent_port = c.master_port != 0 ? c.master_port : 29500;
  std::unique_ptr<StoreServer> agent_server;
  std::unique_ptr<StoreClient> agent;
  if (elastic) {
    if (c.node_rank == 0) agent_server = std::make_unique<StoreServer>(bind_address_for(c.master_addr), agent_port, token);
    agent = std::make_unique<StoreClient>(c.master_addr, agent_port, token, static_cast<std::uint32_t>(1000 + c.node_rank),
                                          std::max(60.0, c.join_timeout_s * 3));
  }
  // Joins the next round of the membership; returns this attempt's configuration, and the
  // port of the workers' store, which the round's first node picks free and publishes (a
  // port computed from the agent's could be another program's).
  auto join_round = [&](int& store_port_out) {
    for (;;) {
      const std::int64_t round = agent->add("round", 0);
      const std::string r = "round/" + std::to_string(round) + "/";
      const std::int64_t idx = agent->add(r + "count", 1) - 1;
      agent->set(r + "node/" + std::to_string(idx), std::to_string(c.node_rank));
      agent->set(r + "addr/" + std::to_string(c.node_rank), c.node_rank == 0 ? c.master_addr : agent->local_address());
      if (idx == 0) {
        // The first to join closes the round: at MAX nodes, or at MIN and a quiet spell.
        std::int64_t seen = 1;
        auto last_join = std::chrono::steady_clock::now();
        for (;;) {
          std::int64_t n = agent->add(r + "count", 0);
          if (n != seen) {
            seen = n;
            last_join = std::chrono::steady_clock::now();
          }
          double quiet = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_join).count();
          if (n >= c.nnodes || (n >= c.min_nodes && quiet >= c.join_timeout_s)) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        std::int64_t closed = std::min<std::int64_t>(agent->add(r + "count", 0), c.nnodes);
        agent->set(r + "closed", std::to_string(closed));
        agent->add("round", 1);  // later joiners meet in the next round
      }
      auto closed_s = agent->get(r + "closed", std::max(120.0, c.join_timeout_s * 4));
      if (!closed_s) throw CommError("weft launch: the nodes did not agree on the members of round " + std::to_string(round));
      const int closed = std::stoi(*closed_s);
      if (idx >= closed) continue;  // joined too late for this round
      std::vector<int> ids;
      for (int i = 0; i < closed; ++i) {
        auto id = agent->get(r + "node/" + std::to_string(i), 60);
        if (!id) throw CommError("weft launch: a member of round " + std::to_string(round) + " vanished");
        ids.push_back(std::stoi(*id));
      }
      std::sort(ids.begin(), ids.end());
      LaunchConfig a = c;
      a.nnodes = closed;
      a.node_rank = static_cast<int>(std::find(ids.begin(), ids.end(), c.node_rank) - ids.begin());
      auto addr = agent->get(r + "addr/" + std::to_string(ids[0]), 60);
      a.master_addr = addr ? *addr : c.master_addr;
      if (a.node_rank == 0) agent->set(r + "store_port", std::to_string(free_port()));
      auto store_port = agent->get(r + "store_port", 60);
      if (!store_port) throw CommError("weft launch: the first node of round " + std::to_string(round) + " vanished");
      store_port_out = std::stoi(*store_port);
      return a;
    }
  };

  int last_nodes = c.nnodes;
  for (int attempt = 0;; ++attempt) {
    LaunchConfig a = live;
    int port = c.master_port != 0 ? c.master_port : (c.nnodes == 1 ? free_port() : 29500);
    if (elastic) {
      a = join_round(port);
      if (attempt == 0 || a.nnodes != last_nodes)
        std::fprintf(stderr, "weft launch: %s with %d node(s) (this one is node %d)\n",
                     attempt == 0 ? "starting" : "continuing", a.nnodes, a.node_rank);
      last_nodes = a.nnodes;
    }
    int failed_rank = -1;
    int code = run_attempt(a, token, port, threads, attempt, &failed_rank);
    if (code == 0 && live_server && g_signal == 0) {
      // This node's ranks left a live job that goes on: its store stays until the others end.
      StoreClient self("127.0.0.1", live_server->port(), token, 4000, 10);
      auto going_on = [&] { return !self.check("live/done") && live_server->connections() > 1; };
      if (going_on())
        std::fprintf(stderr, "weft launch: this node's ranks left the live job; its store stays until the others end\n");
      while (going_on() && g_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (code == 0) return 0;
    if (g_signal != 0) return c.stop_status == "ranks" ? code : 128 + g_signal;
    if (attempt >= c.max_restarts) return code;
    std::fprintf(stderr, "weft launch: restarting all ranks (restart %d of %d)\n", attempt + 1, c.max_restarts);
  }
}

}  // namespace weft::comm
