// Who this process is in the job: rank, world, local rank, and where the store is. Found
// from the environment of weft launch / torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), of mpirun (OMPI_COMM_WORLD_*, PMI_*), or of
// Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...).
#pragma once

#include <string>
#include <vector>

namespace weft::comm {

struct ProcessInfo {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher = "none";  // weft/torchrun, mpirun, slurm, none
};

// Throws ConfigError on inconsistent or malformed variables (a rank outside the world,
// a port that is not a number, ...).
ProcessInfo process_info_from_env();

// The cores this process may run on, in order (its affinity mask: a cpuset, taskset or a
// launcher's binding is respected).
std::vector<int> allowed_cores();
// The cores process `local` of `nproc` on this node is bound to, out of `cores`: a contiguous
// block of cores/nproc when there are enough, else core local % cores (processes that share
// a core alternate, as mpirun --map-by core places them). weft launch binds ranks by it and
// weft serve its replicas.
std::vector<int> cores_for_rank(const std::vector<int>& cores, int local, int nproc);
// This program's path (/proc/self/exe), for starting more of it; "weft" if unknown.
std::string self_executable();
// The command line of a job of `ranks` ranks on this node that runs `command` (its program
// this one, whatever the command's first word): `weft launch --nproc-per-node RANKS
// <launch_flags...> -- <this program> <command[1:]...>`.
std::vector<std::string> local_job_command(int ranks, const std::vector<std::string>& launch_flags,
                                           const std::vector<std::string>& command);
// Runs this process's own command line again (/proc/self/cmdline) as a job of `ranks` ranks
// on this node: replaces this process with `weft launch --nproc-per-node RANKS --no-prefix
// --stop-status ranks -- <the command line>` (each rank bound to its share of the cores; after
// SIGTERM the ranks' status, as the command alone would exit), every signal unblocked first
// (a mask outlives exec). For a command that needs several ranks and was run alone.
// Returns only by throwing Error, when the command line cannot be read or exec fails.
[[noreturn]] void exec_as_local_job(int ranks);
// Where a file of the weft command's own (the torch backend's Python folder, the MPI
// backend's library) may be: beside the executable in a build tree, then in <libdir>/weft
// once installed. Both paths, in that order; which exists is the caller's to find.
std::vector<std::string> own_file_candidates(const std::string& name);

// The first host of a Slurm host list such as "node[03-05,9],gpu1".
std::string first_slurm_host(const std::string& list);

}  // namespace weft::comm
