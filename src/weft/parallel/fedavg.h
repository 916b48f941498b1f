// Federated averaging (seed 003 chapter 10): clients train on their private data, and every
// round a server averages their model weights. Here rank 0 is the server: the weights are
// reduced to it (average) and broadcast back, so every client starts the next round from
// the average.
#pragma once

#include "weft/comm/communicator.h"
#include "weft/nn/module.h"
#include "weft/parallel/strategy.h"

namespace weft::parallel {

void average_weights(Module& model, comm::Communicator& comm);

// The strategy: every client (rank of `clients`) starts from rank 0's weights, takes
// `local_steps` steps on its own batches, then the weights are averaged (a round); a run
// that stops inside a round averages after its last step too. Every `eval_rounds` rounds (0:
// never) a round end asks for an evaluation.
class FederatedAveraging : public Strategy {
 public:
  FederatedAveraging(std::shared_ptr<comm::Communicator> clients, std::int64_t local_steps, std::int64_t eval_rounds)
      : clients_(std::move(clients)), local_steps_(local_steps), eval_rounds_(eval_rounds) {}
  std::string name() const override { return "fedavg"; }
  void prepare(ModelPart& part) override;
  bool end_step(std::int64_t step, bool last, CommStats& stats) override;
  std::optional<std::int64_t> round() const override { return last_step_ / local_steps_; }

 private:
  std::shared_ptr<comm::Communicator> clients_;
  std::int64_t local_steps_, eval_rounds_;
  Module* model_ = nullptr;
  std::int64_t last_step_ = 0;
};

}  // namespace weft::parallel
