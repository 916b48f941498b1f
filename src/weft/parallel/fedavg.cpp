#include "weft/parallel/fedavg.h"

#include "weft/parallel/ddp.h"

namespace weft::parallel {

void average_weights(Module& model, comm::Communicator& comm) {
  for (auto& p : model.parameters()) {
    Var q = p;
    Tensor& v = q.mutable_value();
    auto dt = comm_dtype(v);
    comm.reduce(v.raw_data(), v.raw_data(), v.numel(), dt, comm::ReduceOp::kAvg, 0)->wait();
    comm.broadcast(v.raw_data(), v.numel(), dt, 0)->wait();
  }
}

}  // namespace weft::parallel
