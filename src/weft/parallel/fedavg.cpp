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

namespace weft::parallel {

void FederatedAveraging::prepare(ModelPart& part) {
  model_ = &part.model;
  if (clients_) average_weights(*model_, *clients_);  // one starting point
}

bool FederatedAveraging::end_step(std::int64_t step, bool last, CommStats& stats) {
  last_step_ = step;
  if (!clients_ || (step % local_steps_ != 0 && !last)) return false;
  const auto start = std::chrono::steady_clock::now();
  average_weights(*model_, *clients_);
  const auto end = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(end - start).count();
  stats.seconds += s;
  stats.exposed_seconds += s;
  record_span("average weights", "comm", 0, start, end);
  return step % local_steps_ == 0 && eval_rounds_ > 0 && *round() % eval_rounds_ == 0;
}

}  // namespace weft::parallel
