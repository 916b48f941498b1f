// The training loop's few numbers over a group of ranks (the data-parallel replicas, the
// ranks of one model copy, the whole job): sums and gathers of a handful of values, so that
// train/ calls no collective itself (tests/layering.py checks it). A group without a
// communicator is one rank: its sums and gathers are its own values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace weft::comm {
class Communicator;
}

namespace weft::parallel {

class RankGroup {
 public:
  explicit RankGroup(comm::Communicator* group = nullptr) : group_(group) {}
  explicit operator bool() const { return group_ != nullptr; }
  int size() const;
  int rank() const;
  // Collective: every rank's values summed element by element, in place.
  void sum(double* values, std::size_t n) const;
  void sum(std::int64_t* values, std::size_t n) const;
  void sum(std::vector<double>& values) const { sum(values.data(), values.size()); }
  // Collective: every rank's value, in rank order.
  std::vector<double> gather(double mine) const;
  std::vector<std::int64_t> gather(std::int64_t mine) const;
  // Marks the start of an iteration in this rank's trace (WEFT_TRACE; comm/trace.h).
  void trace_mark(const std::string& name) const;

 private:
  comm::Communicator* group_;
};

}  // namespace weft::parallel
