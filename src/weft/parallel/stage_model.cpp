#include "weft/parallel/stage_model.h"

#include <cmath>

#include "weft/autograd/functions.h"
#include "weft/tensor/ops.h"

namespace weft::parallel {

Var LocalGpt::embed(const Tensor& ids) { return model_.embed(Var(ids)); }

Var LocalGpt::head_loss(const Var& x, const std::vector<std::int32_t>& targets) {
  const std::int64_t N = x.size(0) * x.size(1);
  return cross_entropy(reshape(model_.head(x), {N, model_.config().vocab}), targets);
}

NormWeight norm_weight(const StageModel& model, const std::string& skip) {
  return [&model, skip](const std::string& name) { return name == skip ? 0.0 : model.norm_share(name); };
}

double clip_grad_norm(const std::vector<std::pair<std::string, Var>>& params, const NormWeight& weight,
                      comm::Communicator* group, double max_norm) {
  double sq = 0;
  for (const auto& [name, p] : params) {
    if (!p.grad().defined()) continue;
    const Tensor g = p.grad().contiguous();
    const float* d = g.data<float>();
    double s = 0;
    for (std::int64_t i = 0; i < g.numel(); ++i) s += static_cast<double>(d[i]) * static_cast<double>(d[i]);
    sq += weight(name) * s;
  }
  if (group && group->size() > 1) group->allreduce(&sq, 1, comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (const auto& [name, p] : params) {
      if (!p.grad().defined()) continue;
      Var q = p;
      q.set_grad(ops::mul(p.grad(), scale));
    }
  }
  return norm;
}

}  // namespace weft::parallel
