#include "weft/comm/mpi_transport.h"

#include <mutex>
#include <optional>

#include "weft/util/error.h"

namespace weft::comm::mpi {

namespace {

std::optional<Backend>& backend() {
  static std::optional<Backend> registered;
  return registered;
}

Backend (*&loader())() {
  static Backend (*load)() = nullptr;
  return load;
}

const Backend& linked() {
  static std::once_flag loaded;  // (a loader that throws leaves it unset: the next call tries again)
  std::call_once(loaded, [] {
    if (!backend() && loader()) backend() = loader()();
  });
  if (!backend()) throw ConfigError("--transport mpi: this weft was built without MPI (it needs weft::comm_mpi linked)");
  return *backend();
}

}  // namespace

void register_backend(const Backend& b) { backend() = b; }
void register_backend_loader(Backend (*load)()) { loader() = load; }

bool built_with_mpi() { return backend().has_value() || loader() != nullptr; }
void init(int* rank, int* world) { linked().init(rank, world); }
std::shared_ptr<Group> world_group() { return linked().world_group(); }
std::shared_ptr<Group> make_group(const Group& parent, const std::vector<int>& parent_ranks) {
  return linked().make_group(parent, parent_ranks);
}
void execute(const algo::Program& program, const ExecBuffers& buffers, Group& group, const ExecContext& ctx,
             StepSends* sends) {
  linked().execute(program, buffers, group, ctx, sends);
}
void native(algo::Collective c, Group& group, const void* in, void* out, std::int64_t count, DataType t, ReduceOp op,
            int root) {
  linked().native(c, group, in, out, count, t, op, root);
}

}  // namespace weft::comm::mpi
