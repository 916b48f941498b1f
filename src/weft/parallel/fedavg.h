// Federated averaging (seed 003 chapter 10): clients train on their private data, and every
// round a server averages their model weights. Here rank 0 is the server: the weights are
// reduced to it (average) and broadcast back, so every client starts the next round from
// the average.
#pragma once

#include "weft/comm/communicator.h"
#include "weft/nn/module.h"

namespace weft::parallel {

void average_weights(Module& model, comm::Communicator& comm);

}  // namespace weft::parallel
