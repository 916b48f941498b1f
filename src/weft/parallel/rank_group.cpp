#include "weft/parallel/rank_group.h"

#include "weft/comm/communicator.h"

namespace weft::parallel {

int RankGroup::size() const { return group_ ? group_->size() : 1; }

int RankGroup::rank() const { return group_ ? group_->rank() : 0; }

void RankGroup::sum(double* values, std::size_t n) const {
  if (group_ && n > 0)
    group_->allreduce(values, static_cast<std::int64_t>(n), comm::DataType::kF64, comm::ReduceOp::kSum)->wait();
}

void RankGroup::sum(std::int64_t* values, std::size_t n) const {
  if (group_ && n > 0)
    group_->allreduce(values, static_cast<std::int64_t>(n), comm::DataType::kI64, comm::ReduceOp::kSum)->wait();
}

std::vector<double> RankGroup::gather(double mine) const {
  std::vector<double> all(static_cast<std::size_t>(size()), mine);
  if (group_) group_->allgather(&mine, all.data(), 1, comm::DataType::kF64)->wait();
  return all;
}

std::vector<std::int64_t> RankGroup::gather(std::int64_t mine) const {
  std::vector<std::int64_t> all(static_cast<std::size_t>(size()), mine);
  if (group_) group_->allgather(&mine, all.data(), 1, comm::DataType::kI64)->wait();
  return all;
}

void RankGroup::trace_mark(const std::string& name) const {
  if (group_) group_->trace_mark(name);
}

}  // namespace weft::parallel
