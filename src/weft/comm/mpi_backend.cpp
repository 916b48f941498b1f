// The MPI backend of mpi_transport.h: MPI's point-to-point messages under weft's schedules,
// and MPI's own collectives. Its own library (weft::comm_mpi), so that a program links MPI
// only when it asks for it; linking the library registers the backend.
#include <mpi.h>

#include <cstring>

#include "weft/algo/collective_facts.h"
#include "weft/comm/mpi_transport.h"
#include "weft/util/error.h"

namespace weft::comm::mpi {

namespace {

class MpiGroup : public Group {
 public:
  explicit MpiGroup(MPI_Comm c, bool owned) : comm(c), owned_(owned) {}
  ~MpiGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Comm_free(&comm);
  }
  MPI_Comm comm;

 private:
  bool owned_;
};

MPI_Comm comm_of(Group& g) { return static_cast<MpiGroup&>(g).comm; }

void check(int rc, const ExecContext* ctx, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  std::string op = ctx ? ctx->op : std::string(what);
  throw CommError(op + " failed in " + what + ": " + std::string(msg, static_cast<size_t>(len)), op,
                  ctx ? ctx->rank : -1);
}

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::kF32: return MPI_FLOAT;
    case DataType::kF64: return MPI_DOUBLE;
    case DataType::kI32: return MPI_INT32_T;
    case DataType::kI64: return MPI_INT64_T;
    case DataType::kF16: case DataType::kBF16: return MPI_UINT16_T;  // moved, never reduced by MPI
    case DataType::kI8: return MPI_INT8_T;
    case DataType::kU8: return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAvg: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kProd: return MPI_PROD;
  }
  return MPI_SUM;
}

// Messages larger than INT_MAX bytes go as several.
constexpr std::int64_t kMaxMessage = 1 << 30;

void mpi_init(int* rank, int* world) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (provided < MPI_THREAD_SERIALIZED) throw ConfigError("this MPI library cannot serve calls from several threads");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, world);
}

std::shared_ptr<Group> mpi_world_group() { return std::make_shared<MpiGroup>(MPI_COMM_WORLD, false); }

std::shared_ptr<Group> mpi_make_group(const Group& parent, const std::vector<int>& parent_ranks) {
  MPI_Comm pc = static_cast<const MpiGroup&>(parent).comm;
  MPI_Group pg, g;
  MPI_Comm_group(pc, &pg);
  MPI_Group_incl(pg, static_cast<int>(parent_ranks.size()), parent_ranks.data(), &g);
  MPI_Comm nc;
  check(MPI_Comm_create_group(pc, g, 0, &nc), nullptr, "MPI_Comm_create_group");
  MPI_Group_free(&g);
  MPI_Group_free(&pg);
  MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN);
  return std::make_shared<MpiGroup>(nc, true);
}

void mpi_execute(const algo::Program& program, const ExecBuffers& b, Group& group, const ExecContext& ctx,
             StepSends* step_sends) {
  MPI_Comm comm = comm_of(group);
  const std::size_t esize = b.direct.empty() ? element_size(b.dtype) : 1;
  auto addr = [&](const algo::Chunk& c) -> std::uint8_t* {
    switch (c.buf) {
      case algo::Buf::kData: return b.data + (c.offset - b.data_origin) * static_cast<std::int64_t>(esize);
      case algo::Buf::kScratch: return b.scratch + c.offset * static_cast<std::int64_t>(esize);
      case algo::Buf::kInput: return const_cast<std::uint8_t*>(b.input) + c.offset * static_cast<std::int64_t>(esize);
    }
    return nullptr;
  };
  if (step_sends) step_sends->assign(program.steps.size(), {});
  std::vector<std::vector<std::uint8_t>> temps;
  for (std::size_t s = 0; s < program.steps.size(); ++s) {
    const algo::Step& step = program.steps[s];
    std::vector<MPI_Request> reqs;
    struct Pending {
      std::uint8_t* dst;
      const std::uint8_t* base;  // dst = base (op) received, when set
      std::size_t temp;
      std::int64_t count;
    };
    std::vector<Pending> reductions;
    temps.clear();
    for (std::size_t i = 0; i < step.ops.size(); ++i) {
      const algo::Op& op = step.ops[i];
      auto post = [&](std::uint8_t* p, std::int64_t bytes, bool send) {
        std::int64_t off = 0;
        do {
          int piece = static_cast<int>(std::min(bytes - off, kMaxMessage));
          reqs.emplace_back();
          int rc = send ? MPI_Isend(p + off, piece, MPI_BYTE, op.peer, 7, comm, &reqs.back())
                        : MPI_Irecv(p + off, piece, MPI_BYTE, op.peer, 7, comm, &reqs.back());
          check(rc, &ctx, send ? "MPI_Isend" : "MPI_Irecv");
          off += piece;
        } while (off < bytes);
      };
      switch (op.kind) {
        case algo::OpKind::kCopy:
          std::memmove(addr(op.dst), addr(op.src), static_cast<std::size_t>(op.dst.count) * esize);
          break;
        case algo::OpKind::kReduce:
          reduce_into(b.dtype, b.op, addr(op.dst), addr(op.src), static_cast<std::size_t>(op.dst.count));
          break;
        case algo::OpKind::kSend: {
          std::int64_t bytes = op.src.count * static_cast<std::int64_t>(esize);
          post(b.direct.empty() ? addr(op.src) : b.direct[i], bytes, true);
          if (step_sends) (*step_sends)[s].emplace_back(op.peer, bytes);
          break;
        }
        case algo::OpKind::kRecv:
          post(b.direct.empty() ? addr(op.dst) : b.direct[i], op.dst.count * static_cast<std::int64_t>(esize), false);
          break;
        case algo::OpKind::kRecvReduce: {
          temps.emplace_back(static_cast<std::size_t>(op.dst.count) * esize);
          reductions.push_back({addr(op.dst), op.src.count > 0 ? addr(op.src) : nullptr, temps.size() - 1,
                                op.dst.count});
          post(temps.back().data(), op.dst.count * static_cast<std::int64_t>(esize), false);
          break;
        }
      }
    }
    check(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), &ctx, "MPI_Waitall");
    for (const auto& r : reductions) {
      if (r.base) {
        reduce_from(b.dtype, b.op, r.dst, r.base, temps[r.temp].data(), static_cast<std::size_t>(r.count));
      } else {
        reduce_into(b.dtype, b.op, r.dst, temps[r.temp].data(), static_cast<std::size_t>(r.count));
      }
    }
  }
}

void mpi_native(algo::Collective c, Group& group, const void* in, void* out, std::int64_t count, DataType t, ReduceOp op,
            int root) {
  MPI_Comm comm = comm_of(group);
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  if (count > INT32_MAX) throw ConfigError("the mpi algorithm handles at most 2^31 - 1 elements");
  const int n = static_cast<int>(count);
  const MPI_Datatype dt = mpi_type(t);
  const void* send = in == out ? MPI_IN_PLACE : in;
  using algo::Collective;
  if (algo::facts(c).reduces && (t == DataType::kF16 || t == DataType::kBF16))
    throw ConfigError(std::string("the mpi algorithm cannot reduce ") + dtype_name(t) +
                      " (MPI has no 16-bit float type); weft's own algorithms can");
  ExecContext ctx{algo::collective_name(c), rank, 0, nullptr, {}, {}};
  int rc = MPI_SUCCESS;
  switch (c) {
    case Collective::kAllReduce: rc = MPI_Allreduce(send, out, n, dt, mpi_op(op), comm); break;
    case Collective::kBroadcast: rc = MPI_Bcast(out, n, dt, root, comm); break;
    case Collective::kReduce:
      rc = MPI_Reduce(rank == root ? send : in, out, n, dt, mpi_op(op), root, comm);
      break;
    case Collective::kGather: rc = MPI_Gather(in, n, dt, out, n, dt, root, comm); break;
    case Collective::kScatter: rc = MPI_Scatter(in, n, dt, out, n, dt, root, comm); break;
    case Collective::kAllGather: rc = MPI_Allgather(in, n, dt, out, n, dt, comm); break;
    case Collective::kReduceScatter: rc = MPI_Reduce_scatter_block(in, out, n, dt, mpi_op(op), comm); break;
    case Collective::kAllToAll: rc = MPI_Alltoall(in, n, dt, out, n, dt, comm); break;
    case Collective::kBarrier: rc = MPI_Barrier(comm); break;
  }
  check(rc, &ctx, "MPI");
}

Backend entry_points() { return {mpi_init, mpi_world_group, mpi_make_group, mpi_execute, mpi_native}; }

const bool registered = (register_backend(entry_points()), true);
}  // namespace

}  // namespace weft::comm::mpi

// The entry points, for a program that loads this file's library on first use (the weft
// command's libweft_mpi.so: register_backend_loader).
extern "C" __attribute__((visibility("default"))) void weft_mpi_backend_entry_points(weft::comm::mpi::Backend* out) {
  *out = weft::comm::mpi::entry_points();
}

// Named by the library's link option (-Wl,--undefined), so that the linker keeps this file,
// and with it the registration above, in every program that links weft::comm_mpi.
extern "C" {
int weft_mpi_backend_linked = 1;
}
