// Splitting a labelled dataset among federated clients.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "weft/tensor/rng.h"

namespace weft {

// Label skew with Dirichlet(alpha): for every class, the shares of the clients are drawn
// from Dirichlet(alpha, ..., alpha) and the class's samples (shuffled) are dealt
// accordingly. Small alpha: each client sees few classes; alpha = infinity: IID, every
// client gets every client-count-th sample of one seeded permutation. Every sample goes to
// exactly one client. (weft train with IID clients deals each global batch instead, as for
// data parallelism: data/deal.h.)
std::vector<std::vector<std::int64_t>> dirichlet_partition(const std::vector<std::int32_t>& labels, int classes,
                                                           int clients, double alpha, std::uint64_t seed);

// A Gamma(shape, 1) draw (Marsaglia and Tsang's method).
double gamma_sample(Rng& rng, double shape);

}  // namespace weft
