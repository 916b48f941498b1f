#include "weft/sim/fluid_model.h"

#include <algorithm>
#include <cmath>

#include "weft/sim/max_min.h"

namespace weft::sim {

FluidModel::FluidModel(std::vector<double> capacity, double tolerance, Moved moved)
    : capacity_(std::move(capacity)),
      tolerance_(tolerance),
      moved_(std::move(moved)),
      on_port_(capacity_.size()),
      port_seen_(capacity_.size(), 0),
      local_of_port_(capacity_.size(), -1) {}

int FluidModel::add(const std::int32_t* path, std::size_t n, double bytes, Time now) {
  if (dead_path_ > 4096 && dead_path_ > path_.size() / 2) compact_paths();
  int id;
  if (free_.empty()) {
    id = static_cast<int>(parts_.size());
    parts_.emplace_back();
  } else {
    id = free_.back();
    free_.pop_back();
  }
  Part& p = parts_[static_cast<std::size_t>(id)];
  const std::uint32_t version = p.version + 1;
  p = Part{};
  p.version = version;
  p.path_begin = static_cast<std::uint32_t>(path_.size());
  p.path_len = static_cast<std::uint32_t>(n);
  for (std::size_t hop = 0; hop < n; ++hop) {
    std::vector<User>& users = on_port_[static_cast<std::size_t>(path[hop])];
    path_.push_back(path[hop]);
    place_.push_back(static_cast<std::uint32_t>(users.size()));
    users.push_back({id, static_cast<std::uint32_t>(hop)});
  }
  p.remaining = bytes;
  p.since = p.start = now;
  p.live = true;
  ++live_;
  added_.push_back(id);
  return id;
}

void FluidModel::settle(int part, Time now) {
  Part& p = parts_[static_cast<std::size_t>(part)];
  const double moved = std::min(p.remaining, p.rate * to_seconds(now - p.since));
  p.since = now;
  if (moved <= 0) return;
  p.remaining -= moved;
  moved_(part, moved);
}

void FluidModel::remove(int part) {
  Part& p = parts_[static_cast<std::size_t>(part)];
  for (std::uint32_t hop = 0; hop < p.path_len; ++hop) {
    const std::int32_t port = path_[p.path_begin + hop];
    std::vector<User>& users = on_port_[static_cast<std::size_t>(port)];
    const std::uint32_t at = place_[p.path_begin + hop];
    const User last = users.back();
    users[at] = last;
    place_[parts_[static_cast<std::size_t>(last.part)].path_begin + last.hop] = at;
    users.pop_back();
    freed_ports_.push_back(port);
  }
  p.live = false;
  ++p.version;
  --live_;
  dead_path_ += p.path_len;
}

void FluidModel::compact_paths() {
  std::vector<std::int32_t> path;
  std::vector<std::uint32_t> place;
  path.reserve(path_.size() - dead_path_);
  place.reserve(path_.size() - dead_path_);
  for (Part& p : parts_) {
    if (!p.live) continue;
    const auto begin = static_cast<std::uint32_t>(path.size());
    path.insert(path.end(), path_.begin() + p.path_begin, path_.begin() + p.path_begin + p.path_len);
    place.insert(place.end(), place_.begin() + p.path_begin, place_.begin() + p.path_begin + p.path_len);
    p.path_begin = begin;
  }
  path_.swap(path);
  place_.swap(place);
  dead_path_ = 0;
}

bool FluidModel::valid(const Due& d) const {
  const Part& p = parts_[static_cast<std::size_t>(d.part)];
  return p.live && p.version == d.version;
}

int FluidModel::complete(Time now, const std::function<void(int part)>& done) {
  int count = 0;
  for (Heap* heap : {&finish_, &tolerance_due_}) {
    while (!heap->empty() && heap->top().at <= now) {
      const Due d = heap->top();
      heap->pop();
      if (!valid(d)) continue;
      Part& p = parts_[static_cast<std::size_t>(d.part)];
      // Its rest goes now: what the rate moved by now, and (tolerance) the last bytes early.
      settle(d.part, now);
      if (p.remaining > 0) moved_(d.part, p.remaining);
      p.remaining = 0;
      remove(d.part);
      ++count;
      done(d.part);
      free_.push_back(d.part);  // after done(): a part it adds takes another id
    }
  }
  return count;
}

bool FluidModel::recompute(Time now) {
  if (added_.empty() && freed_ports_.empty()) return false;
  // The parts the changes reach: the added ones and those on the freed ports, then every
  // part sharing a port with a reached one.
  std::vector<std::int32_t> ports, stack;
  std::vector<int> reached;
  auto visit = [&](std::int32_t port) {
    char& seen = port_seen_[static_cast<std::size_t>(port)];
    if (seen) return;
    seen = 1;
    ports.push_back(port);
    stack.push_back(port);
  };
  auto reach = [&](int part) {
    Part& p = parts_[static_cast<std::size_t>(part)];
    if (!p.live || p.reached) return;
    p.reached = true;
    reached.push_back(part);
    for (std::uint32_t hop = 0; hop < p.path_len; ++hop) visit(path_[p.path_begin + hop]);
  };
  for (int part : added_) reach(part);
  for (std::int32_t port : freed_ports_) visit(port);
  added_.clear();
  freed_ports_.clear();
  while (!stack.empty()) {
    const std::int32_t port = stack.back();
    stack.pop_back();
    for (const User& u : on_port_[static_cast<std::size_t>(port)]) reach(u.part);
  }
  // Max-min over the reached parts and their ports, numbered locally.
  std::vector<double> capacity;
  capacity.reserve(ports.size());
  for (std::int32_t port : ports) {
    local_of_port_[static_cast<std::size_t>(port)] = static_cast<std::int32_t>(capacity.size());
    capacity.push_back(capacity_[static_cast<std::size_t>(port)]);
  }
  FlowPaths paths;
  paths.begin.reserve(reached.size() + 1);
  std::vector<std::int32_t> local;
  for (int part : reached) {
    const Part& p = parts_[static_cast<std::size_t>(part)];
    local.clear();
    for (std::uint32_t hop = 0; hop < p.path_len; ++hop)
      local.push_back(local_of_port_[static_cast<std::size_t>(path_[p.path_begin + hop])]);
    paths.add(local.data(), local.size());
  }
  const std::vector<double> rates = max_min_rates(paths, capacity);
  for (std::size_t i = 0; i < reached.size(); ++i) {
    const int part = reached[i];
    Part& p = parts_[static_cast<std::size_t>(part)];
    p.reached = false;
    // A rate the change left as it was (within rounding) keeps its finish: most of a large
    // component, when one part starts or ends on a link that is not its bottleneck.
    if (p.rate > 0 && std::abs(rates[i] - p.rate) <= 1e-12 * p.rate) continue;
    settle(part, now);
    p.rate = rates[i];
    ++p.version;
    const double rest_ps = p.remaining / p.rate * 1e12;
    const Time finish = p.since + std::max<Time>(1, static_cast<Time>(std::ceil(std::min(rest_ps, 1e18))));
    finish_.push({finish, part, p.version});
    if (tolerance_ > 0) {
      // The first time its rest would take under `tolerance` of the time it has been going.
      const double due = (static_cast<double>(p.since) + rest_ps + tolerance_ * static_cast<double>(p.start)) / (1 + tolerance_);
      tolerance_due_.push({std::min(finish, static_cast<Time>(std::ceil(due))), part, p.version});
    }
  }
  for (std::int32_t port : ports) {
    port_seen_[static_cast<std::size_t>(port)] = 0;
    local_of_port_[static_cast<std::size_t>(port)] = -1;
  }
  // Stale entries (parts recomputed or done since) are dropped once they outnumber the rest.
  for (Heap* heap : {&finish_, &tolerance_due_})
    if (heap->size() > 4 * live_ + 1024) {
      std::vector<Due> kept;
      kept.reserve(live_);
      while (!heap->empty()) {
        if (valid(heap->top())) kept.push_back(heap->top());
        heap->pop();
      }
      *heap = Heap(std::greater<>(), std::move(kept));
    }
  ++recomputations_;
  parts_recomputed_ += reached.size();
  return true;
}

Time FluidModel::next_finish() {
  while (!finish_.empty() && !valid(finish_.top())) finish_.pop();
  return finish_.empty() ? kNever : finish_.top().at;
}

void FluidModel::settle_all(Time now) {
  for (std::size_t part = 0; part < parts_.size(); ++part)
    if (parts_[part].live && now > parts_[part].since) settle(static_cast<int>(part), now);
}

}  // namespace weft::sim
