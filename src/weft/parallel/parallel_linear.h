// The block's products sliced over a tensor-parallel group (Megatron-LM, Shoeybi et al. 2019;
// seed 002 chapter 8), as decoder_block.h's BlockLinear:
//
//   ColumnParallelLinear  this rank's rows of W and b (kHeads, kOutputs): the input is
//                         replicated, so backward all-reduces its gradient ("f", tp_copy)
//   RowParallelLinear     this rank's columns of W (kInputs): forward all-reduces the
//                         partial products ("g", tp_reduce), then adds the whole bias
//
// With autograd; the parameters are the strategy's (TensorParallelGpt's shards), held by handle.
#pragma once

#include <memory>

#include "weft/comm/communicator.h"
#include "weft/nn/decoder_block.h"

namespace weft::parallel {

class ColumnParallelLinear : public BlockLinear {
 public:
  ColumnParallelLinear(Var weight, Var bias, comm::Communicator& group)
      : weight_(std::move(weight)), bias_(std::move(bias)), group_(&group) {}
  Var forward(const Var& x) const override;

 private:
  Var weight_, bias_;
  comm::Communicator* group_;
};

class RowParallelLinear : public BlockLinear {
 public:
  RowParallelLinear(Var weight, Var bias, comm::Communicator& group)
      : weight_(std::move(weight)), bias_(std::move(bias)), group_(&group) {}
  Var forward(const Var& x) const override;

 private:
  Var weight_, bias_;
  comm::Communicator* group_;
};

// The communication operators, usable on their own (tests).
Var tp_copy(const Var& x, comm::Communicator& group);     // identity; backward all-reduces ("f")
Var tp_reduce(const Var& x, comm::Communicator& group);   // all-reduce; backward identity ("g")
Var tp_gather_last(const Var& x, comm::Communicator& group);  // all-gather along the last dim; backward reduce-scatter

}  // namespace weft::parallel
