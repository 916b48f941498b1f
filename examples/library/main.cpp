// A program of your own built on the installed weft library: data-parallel training of a
// small network on points inside or outside a circle. Each rank of `weft launch` trains on
// its own half of every batch; weft's DistributedDataParallel averages the gradients with
// an all-reduce over weft's communicator (shared memory on one machine, TCP across).
//
//   cmake -S examples/library -B build-example -DCMAKE_PREFIX_PATH=<where weft is installed>
//   cmake --build build-example
//   weft launch --nproc-per-node 2 build-example/circle
#include <cmath>
#include <cstdio>
#include <vector>

#include "weft/autograd/functions.h"
#include "weft/comm/communicator.h"
#include "weft/comm/mpi_transport.h"
#include "weft/nn/models.h"
#include "weft/optim/sgd.h"
#include "weft/parallel/ddp.h"

using namespace weft;

int main() {
  auto comm = comm::Communicator::init();  // the job weft launch (or mpirun, or Slurm) started
  const int rank = comm->rank(), world = comm->size();
  Rng rng(7);  // the same on every rank; DDP also starts every replica from rank 0's weights
  auto model = make_mlp({2, 32, 2}, rng);
  parallel::DistributedDataParallel ddp(*model, comm);
  SGD sgd(model->named_parameters(), 0.5, 0.9);

  // A fixed data set: label 1 inside the circle of radius 0.7.
  const int n = 512, batch = 64;
  std::vector<float> xy(2 * n);
  std::vector<std::int32_t> label(n);
  Rng data(1);
  for (int i = 0; i < n; ++i) {
    xy[2 * i] = static_cast<float>(data.uniform() * 2 - 1);
    xy[2 * i + 1] = static_cast<float>(data.uniform() * 2 - 1);
    label[i] = std::hypot(xy[2 * i], xy[2 * i + 1]) < 0.7 ? 1 : 0;
  }
  const int shard = batch / world;  // this rank's rows of each batch
  float loss_value = 0;
  for (int epoch = 0; epoch < 30; ++epoch) {
    for (int start = 0; start + batch <= n; start += batch) {
      const int first = start + rank * shard;
      std::vector<float> x(xy.begin() + 2 * first, xy.begin() + 2 * (first + shard));
      std::vector<std::int32_t> y(label.begin() + first, label.begin() + first + shard);
      Var loss = cross_entropy(model->forward(Var(Tensor::from_vector(x, {shard, 2}))), y);
      sgd.zero_grad();
      loss.backward();
      ddp.finish();  // the averaged gradients
      sgd.step();
      loss_value = static_cast<float>(loss.item());
    }
  }
  // Accuracy over the whole set (every replica holds the same weights).
  Tensor logits = model->forward(Var(Tensor::from_vector(xy, {n, 2}))).value();
  int right = 0;
  for (int i = 0; i < n; ++i) right += (logits.at({i, 1}) > logits.at({i, 0})) == (label[i] == 1);
  if (rank == 0)
    std::printf("ranks %d, last loss %.4f, accuracy %.3f, MPI transport %s\n", world, loss_value,
                static_cast<double>(right) / n, comm::mpi::built_with_mpi() ? "linked" : "not linked");
  return 0;
}
