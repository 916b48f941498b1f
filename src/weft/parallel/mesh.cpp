#include "weft/parallel/mesh.h"

#include <fmt/format.h>

#include <functional>
#include <vector>

#include "weft/util/error.h"

namespace weft::parallel {

std::string MeshShape::describe() const { return fmt::format("dp {} x pp {} x tp {}", dp, pp, tp); }

Mesh::Mesh(std::shared_ptr<comm::Communicator> world, MeshShape shape) : shape_(shape), world_(std::move(world)) {
  if (shape.dp < 1 || shape.pp < 1 || shape.tp < 1)
    throw ConfigError("mesh " + shape.describe() + ": every dimension must be at least 1");
  const int have = world_ ? world_->size() : 1;
  if (have != shape.size())
    throw ConfigError(fmt::format("mesh {} needs {} ranks, the job has {}", shape.describe(), shape.size(), have));
  if (!world_) return;
  rank_ = world_->rank();
  const int d = dp_rank(), p = pp_rank(), t = tp_rank(), tp = shape.tp, pp = shape.pp;
  auto group = [&](int count, const std::function<int(int)>& member) -> std::shared_ptr<comm::Communicator> {
    if (count == 1) return nullptr;
    if (count == shape.size()) return world_;
    std::vector<int> members;
    for (int i = 0; i < count; ++i) members.push_back(member(i));
    return world_->new_group(members);
  };
  tp_ = group(tp, [&](int i) { return (d * pp + p) * tp + i; });
  pp_ = group(pp, [&](int i) { return (d * pp + i) * tp + t; });
  dp_ = group(shape.dp, [&](int i) { return (i * pp + p) * tp + t; });
  model_ = tp > 1 && pp > 1 ? group(tp * pp, [&](int i) { return d * pp * tp + i; }) : tp > 1 ? tp_ : pp_;
}

}  // namespace weft::parallel
