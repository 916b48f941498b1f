// The device mesh of a job: its ranks arranged as dp x pp x tp, tensor parallelism
// innermost (neighbouring ranks, so one host), then pipeline stages, then data-parallel
// replicas (seed 003 chapter 8; Megatron-LM's layout). Rank r sits at
//   t = r mod tp,  p = (r / tp) mod pp,  d = r / (tp pp)
// and belongs to one group per dimension, plus the model group: the tp x pp ranks that hold
// one copy of the model between them (gradient norms over a whole model are summed there).
//
// A group of one rank is null: strategies skip communication on it. The mesh builds its
// groups once, from the job's communicator; strategies take the groups they need from it.
#pragma once

#include <memory>
#include <string>

#include "weft/comm/communicator.h"

namespace weft::parallel {

struct MeshShape {
  int dp = 1, pp = 1, tp = 1;
  int size() const { return dp * pp * tp; }
  std::string describe() const;  // "dp 2 x pp 2 x tp 2"
};

class Mesh {
 public:
  // A world of one process (every group null).
  Mesh() = default;
  // `world` holds shape.size() ranks (null only for a world of one); throws ConfigError when
  // the sizes disagree.
  Mesh(std::shared_ptr<comm::Communicator> world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  int rank() const { return rank_; }
  int size() const { return shape_.size(); }
  int dp_rank() const { return rank_ / (shape_.tp * shape_.pp); }
  int pp_rank() const { return rank_ / shape_.tp % shape_.pp; }
  int tp_rank() const { return rank_ % shape_.tp; }

  // The groups this rank belongs to; null when of size one.
  const std::shared_ptr<comm::Communicator>& world() const { return world_; }
  const std::shared_ptr<comm::Communicator>& dp() const { return dp_; }
  const std::shared_ptr<comm::Communicator>& pp() const { return pp_; }
  const std::shared_ptr<comm::Communicator>& tp() const { return tp_; }
  const std::shared_ptr<comm::Communicator>& model() const { return model_; }

 private:
  MeshShape shape_;
  int rank_ = 0;
  std::shared_ptr<comm::Communicator> world_, dp_, pp_, tp_, model_;
};

}  // namespace weft::parallel
