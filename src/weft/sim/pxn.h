// PXN (NCCL's "PCI x NVLink", NCCL_PXN_DISABLE=0): a message between GPUs of different hosts
// whose NICs hang off different switches (different rails) goes first over NVLink to the GPU
// of the sender's host on the receiver's rail, whose NIC sends it on that rail, so the
// traffic stays on the rails instead of crossing the spines (seed 002 ch. 13).
//
// The pass rewrites a workload: every such (sender, receiver) pair of agents gets a relay, an
// agent of its own on that GPU, which receives the pair's messages in order and sends each on
// once it has arrived; the sender sends to the relay and the receiver receives from it.
#pragma once

#include "weft/sim/topology.h"
#include "weft/sim/workload.h"

namespace weft::sim {

// Returns the number of relays added.
int route_through_nvlink_peers(Workload& w, const Topology& t);

}  // namespace weft::sim
