// The MPI transport: weft's own schedules over MPI point-to-point messages, and MPI's own
// collectives (the algorithm "mpi") for comparison. Used when WEFT_TRANSPORT=mpi under
// mpirun. The backend that calls MPI is its own library (weft_comm_mpi, built when CMake
// finds MPI; installed as weft::comm_mpi), so that MPI is on a program's link line only when
// the program asks for it: linking that library registers the backend (or a loader does, on
// first use: register_backend_loader). Without either, every entry point reports that this
// weft has no MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/algo/program.h"
#include "weft/comm/executor.h"
#include "weft/comm/reduce.h"

namespace weft::comm::mpi {

// Whether the MPI backend is linked into this program, or a loader for it registered.
bool built_with_mpi();
// Initializes MPI once (thread level: serialized); returns this process's world rank and size.
void init(int* rank, int* world);

// An MPI communicator for a group of world ranks (created collectively by its members).
class Group {
 public:
  virtual ~Group() = default;
};
std::shared_ptr<Group> world_group();
std::shared_ptr<Group> make_group(const Group& parent, const std::vector<int>& parent_ranks);

// Runs one rank's program: every send and receive of a step is posted at once
// (MPI_Isend / MPI_Irecv; receive-reduces land in a temporary and are reduced after
// MPI_Waitall). Peers are ranks of `group`.
void execute(const algo::Program& program, const ExecBuffers& buffers, Group& group, const ExecContext& ctx,
             StepSends* sends);

// MPI's own collective for `c` on `group`, with the communicator's buffer conventions
// (count per rank; see communicator.h).
void native(algo::Collective c, Group& group, const void* in, void* out, std::int64_t count, DataType t, ReduceOp op,
            int root);

// The backend's entry points, one per function above; mpi_backend.cpp registers them.
struct Backend {
  void (*init)(int* rank, int* world);
  std::shared_ptr<Group> (*world_group)();
  std::shared_ptr<Group> (*make_group)(const Group& parent, const std::vector<int>& parent_ranks);
  void (*execute)(const algo::Program&, const ExecBuffers&, Group&, const ExecContext&, StepSends*);
  void (*native)(algo::Collective, Group&, const void* in, void* out, std::int64_t count, DataType, ReduceOp, int root);
};
void register_backend(const Backend& backend);
// A program that keeps the backend in a library of its own, loaded on first use (the weft
// command: libweft_mpi.so, so that its other commands do not load MPI's libraries), names the
// function that loads it and returns its entry points (or throws ConfigError saying why not).
void register_backend_loader(Backend (*load)());

}  // namespace weft::comm::mpi
