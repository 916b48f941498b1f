// Multi-process checks of the strategies, run under `weft launch` by ctest (like gloo's
// multi-process tests): each rank builds the same model and batch from one seed and also
// trains a single-process reference on the whole batch, then
//   mesh        the dp x pp x tp groups of every layout of the job hold the ranks the
//               layout formula gives
//   dp          DataParallel (DDP buckets), Zero 1, 2, 3 and FederatedAveraging (one local
//               step per round) end with the reference's parameters; the replicas agree
//               bitwise; ZeRO's consolidated optimizer state is the reference's
//   fp16        DDP's float16 buckets: gradients beyond float16's range overflow, are
//               all-reduced again in float32 (exact), and the scale shrinks; then gradients
//               within range average to float16's precision
//   resume      a ZeRO-2 state gathered after 2 steps restores into a fresh DDP composition
//               that then takes the very steps of the uninterrupted run
//   gpt         {TensorParallel, Pipeline, Zero 1} on a GPT over the whole job (tp 2, pp
//               W/2) ends with the reference GPT's loss and parameters on rank 0
// Prints "rank 0 of W: N checks, 0 failures"; exits 1 on a failure.
#include <cmath>
#include <cstring>
#include <map>
#include <cstdio>
#include <string>
#include <vector>

#include "rank_checks.h"
#include "weft/autograd/functions.h"
#include "weft/nn/models.h"
#include "weft/nn/transformer.h"
#include "weft/optim/sgd.h"
#include "weft/parallel/ddp.h"
#include "weft/parallel/fedavg.h"
#include "weft/parallel/job.h"
#include "weft/parallel/pipeline.h"
#include "weft/parallel/tensor_parallel.h"
#include "weft/parallel/zero.h"

using namespace weft;
using namespace weft::parallel;
using weft::testing::check;
using weft::testing::g_checks;
using weft::testing::g_failures;

namespace {


OptimizerFactory sgd(double lr, double momentum = 0.9) {
  return [lr, momentum](NamedParameters p) { return std::make_unique<SGD>(std::move(p), lr, momentum, 0.0); };
}

// The largest |a - b| / max|b| over every parameter of two state dicts (by name).
double relative_difference(const StateDict& a, const StateDict& b) {
  std::map<std::string, Tensor> bs(b.begin(), b.end());
  double worst = 0;
  for (const auto& [name, t] : a) {
    auto it = bs.find(name);
    if (it == bs.end() || it->second.numel() != t.numel()) return INFINITY;
    const Tensor x = t.contiguous(), y = it->second.contiguous();
    double diff = 0, scale = 1e-12;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(x.data<float>()[i]) - y.data<float>()[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(y.data<float>()[i])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

// A global batch of `rows` samples of 12 features and 5 classes, the same on every rank.
StepBatch global_batch(std::uint64_t seed, std::int64_t rows) {
  Rng rng(seed);
  StepBatch b{randn({rows, 12}, rng), {}};
  for (std::int64_t i = 0; i < rows; ++i) b.targets.push_back(static_cast<std::int32_t>(rng.below(5)));
  return b;
}

StepBatch rows_of(const StepBatch& b, std::int64_t begin, std::int64_t end) {
  return {b.inputs.slice(0, begin, end).contiguous(),
          std::vector<std::int32_t>(b.targets.begin() + begin, b.targets.begin() + end)};
}

Var classify(Module& m, const StepBatch& b) { return cross_entropy(m.forward(Var(b.inputs)), b.targets); }

std::shared_ptr<Module> small_mlp() {
  Rng rng(11);
  return make_mlp({12, 16, 5}, rng);
}

// `steps` steps of a single process on the whole batches: the reference.
StateDict reference_mlp(int steps, std::int64_t rows, const OptimizerFactory& optimizer = sgd(0.1)) {
  auto model = small_mlp();
  Strategies s(*model);
  s.prepare(optimizer);
  for (int k = 0; k < steps; ++k) s.step(k + 1, k + 1 == steps, global_batch(100 + k, rows), classify, 0);
  return model->state_dict();
}

void check_mesh(const std::shared_ptr<comm::Communicator>& world) {
  const int w = world->size();
  for (int tp : {1, 2}) {
    for (int pp : {1, 2}) {
      if (w % (tp * pp) != 0) continue;
      Mesh mesh(world, MeshShape{w / (tp * pp), pp, tp});
      const int r = world->rank(), t = r % tp, p = r / tp % pp, d = r / (tp * pp);
      auto members = [](const std::shared_ptr<comm::Communicator>& g) { return g ? g->members() : std::vector<int>{}; };
      std::vector<int> want_tp, want_pp, want_dp;
      for (int i = 0; tp > 1 && i < tp; ++i) want_tp.push_back((d * pp + p) * tp + i);
      for (int i = 0; pp > 1 && i < pp; ++i) want_pp.push_back((d * pp + i) * tp + t);
      for (int i = 0; w / (tp * pp) > 1 && i < w / (tp * pp); ++i) want_dp.push_back((i * pp + p) * tp + t);
      const std::string layout = mesh.shape().describe();
      check(members(mesh.tp()) == want_tp, layout + ": tp group");
      check(members(mesh.pp()) == want_pp, layout + ": pp group");
      check(members(mesh.dp()) == want_dp, layout + ": dp group");
      check(mesh.dp_rank() == d && mesh.pp_rank() == p && mesh.tp_rank() == t, layout + ": coordinates");
    }
  }
}

// Trains the small MLP 3 steps under `strategy` on this rank's share; compares with the
// reference and across the replicas.
void check_data_parallel(const std::shared_ptr<comm::Communicator>& world, const std::string& name,
                         std::unique_ptr<Strategy> strategy, const OptimizerFactory& optimizer = sgd(0.1),
                         double tolerance = 1e-5) {
  const int w = world->size(), r = world->rank();
  const std::int64_t rows = 8 * w;
  auto model = small_mlp();
  Strategies s(*model);
  s.add(std::move(strategy));
  s.prepare(optimizer);
  for (int k = 0; k < 3; ++k) s.step(k + 1, k == 2, rows_of(global_batch(100 + k, rows), r * 8, r * 8 + 8), classify, 0);
  s.finish();
  const StateDict mine = model->state_dict();
  const double diff = relative_difference(mine, reference_mlp(3, rows, optimizer));
  check(diff <= tolerance, name + ": parameters within " + std::to_string(tolerance) + " of one process, got " +
                               std::to_string(diff));
  // Bitwise the same on every replica: rank 0's parameters, broadcast, compared.
  for (const auto& [pname, t] : mine) {
    Tensor theirs = t.contiguous().clone();
    world->broadcast(theirs.data<float>(), theirs.numel(), comm::DataType::kF32, 0)->wait();
    check(std::memcmp(theirs.data<float>(), t.contiguous().data<float>(), t.nbytes()) == 0,
          name + ": replicas differ in " + pname);
  }
}

void check_resume(const std::shared_ptr<comm::Communicator>& world) {
  const int w = world->size(), r = world->rank();
  const std::int64_t rows = 8 * w;
  auto batch = [&](int k) { return rows_of(global_batch(100 + k, rows), r * 8, r * 8 + 8); };
  // ZeRO-2 for 2 steps, its state gathered (a checkpoint), then DDP resumed from it.
  auto a = small_mlp();
  Strategies zero(*a);
  zero.add(std::make_unique<Zero>(world, 2, sgd(0.1)));
  zero.prepare(sgd(0.1));
  for (int k = 0; k < 2; ++k) zero.step(k + 1, false, batch(k), classify, 0);
  const TrainState saved = zero.gather_state();
  auto b = small_mlp();
  b->load_state_dict(saved.model);
  Strategies ddp(*b);
  ddp.add(std::make_unique<DataParallel>(world, DdpOptions{}));
  ddp.prepare(sgd(0.1));
  ddp.restore(saved.optimizer, 2);
  ddp.step(3, true, batch(2), classify, 0);
  const double diff = relative_difference(b->state_dict(), reference_mlp(3, rows));
  check(diff <= 1e-5, "ZeRO-2 state resumed under DDP: parameters off by " + std::to_string(diff));
  check(saved.per_rank.size() == static_cast<std::size_t>(w), "ZeRO-2 state: one shard per rank");
}

GptConfig small_gpt() { return GptConfig{40, 8, 16, 4, 4, Positional::kLearned, true, false}; }

void check_gpt_mesh(const std::shared_ptr<comm::Communicator>& world) {
  const int w = world->size();
  if (w % 2 != 0 || w < 4) return;
  const std::int64_t rows = 4;
  auto batch = [&](int k) {
    Rng rng(200 + k);
    StepBatch b{Tensor::empty({rows, 8}), {}};
    for (std::int64_t i = 0; i < rows * 8; ++i) b.inputs.data<float>()[i] = static_cast<float>(rng.below(40));
    for (std::int64_t i = 0; i < rows * 8; ++i) b.targets.push_back(static_cast<std::int32_t>(rng.below(40)));
    return b;
  };
  const LossFn lm_loss = [](Module& m, const StepBatch& b) {
    return cross_entropy(reshape(m.forward(Var(b.inputs)), {b.inputs.numel(), 40}), b.targets);
  };
  Rng r1(5), r2(5);
  GPT reference(small_gpt(), r1), model(small_gpt(), r2);
  Strategies one(reference);
  one.prepare(sgd(0.05));
  double want = 0;
  for (int k = 0; k < 3; ++k) want = one.step(k + 1, k == 2, batch(k), lm_loss, 1.0);
  Mesh mesh(world, MeshShape{1, w / 2, 2});
  Strategies mp(model);
  mp.add(std::make_unique<TensorParallel>(mesh.tp(), mesh.model().get(), false));
  mp.add(std::make_unique<Pipeline>(mesh.pp(), mesh.model().get(), PipelineOptions{2, algo::PipeSchedule::k1F1B, 1, "params"}));
  mp.add(std::make_unique<Zero>(mesh.dp(), 1, sgd(0.05)));
  mp.prepare(sgd(0.05));
  double got = 0;
  for (int k = 0; k < 3; ++k) got = mp.step(k + 1, k == 2, batch(k), lm_loss, 1.0);
  check(std::fabs(got - want) <= 1e-5 * std::fabs(want), "GPT tp 2 x pp " + std::to_string(w / 2) + ": loss " +
                                                             std::to_string(got) + " vs " + std::to_string(want));
  const TrainState state = mp.gather_state();
  mp.finish();
  if (world->rank() == 0) {
    const double diff = relative_difference(model.state_dict(), reference.state_dict());
    check(diff <= 1e-5, "GPT tp 2 x pp: parameters off by " + std::to_string(diff));
    check(relative_difference(state.model, reference.state_dict()) <= 1e-5, "GPT tp 2 x pp: the gathered state");
    check(state.optimizer.size() == reference.state_dict().size(), "GPT tp 2 x pp: a momentum buffer per parameter");
  }
}

}  // namespace

void check_f16_gradients(const std::shared_ptr<comm::Communicator>& world) {
  const int w = world->size(), r = world->rank();
  Var p(Tensor::zeros({4}), true);
  DdpOptions options;
  options.grad_dtype = "fp16";
  DistributedDataParallel ddp(std::vector<Var>{p}, world, options);
  // Round 0 overflows at scale 1; round 1 (1e5 times smaller) runs at the shrunk scale and
  // sets one from its own values, at which round 2 keeps float16's precision.
  const float big[4] = {1e6f, -3e6f, 2.5f, 1e2f};
  for (int round = 0; round < 3; ++round) {
    Tensor g = Tensor::zeros({4});
    for (int i = 0; i < 4; ++i) g.data<float>()[i] = (round == 0 ? big[i] : big[i] * 1e-5f) * static_cast<float>(r + 1);
    p.set_grad(g);
    ddp.finish();
    const float mean = static_cast<float>(w + 1) / 2;  // of (r + 1) over the ranks
    double worst = 0;
    for (int i = 0; i < 4; ++i) {
      const double want = (round == 0 ? big[i] : big[i] * 1e-5) * mean;
      worst = std::max(worst, std::fabs(p.grad().data<float>()[i] - want) / std::fabs(want));
    }
    if (round != 1)
      check(worst <= (round == 0 ? 1e-6 : 2e-3),
            "fp16 round " + std::to_string(round) + ": averaged gradients off by " + std::to_string(worst));
    check(ddp.overflows() == 1, "fp16: " + std::to_string(ddp.overflows()) + " overflows, expected 1 (the first round)");
  }
}

int main() {
  try {
    ParallelOptions options;
    Job job = join_job(options);
    auto world = job.world;
    if (!world) {
      std::fprintf(stderr, "strategy_check needs several ranks: run it under weft launch\n");
      return 2;
    }
    check_mesh(world);
    // Small buckets, so the MLP's gradients travel in several all-reduces.
    check_data_parallel(world, "ddp", std::make_unique<DataParallel>(world, DdpOptions{0.0005, 0.001}));
    for (int stage : {1, 2, 3})
      check_data_parallel(world, "zero-" + std::to_string(stage), std::make_unique<Zero>(world, stage, sgd(0.1)));
    // One local step per round of plain SGD: averaging the weights after the step is
    // averaging the gradients (with momentum it would not be).
    check_data_parallel(world, "fedavg", std::make_unique<FederatedAveraging>(world, 1, 0), sgd(0.1, 0.0));
    check_f16_gradients(world);
    check_resume(world);
    check_gpt_mesh(world);
    std::printf("rank %d of %d: %d checks, %d failures\n", world->rank(), world->size(), g_checks, g_failures);
    return g_failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
