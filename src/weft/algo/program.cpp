#include "weft/algo/program.h"

#include "weft/algo/collective_facts.h"

#include <algorithm>
#include <map>

#include "weft/util/error.h"

namespace weft::algo {

Step& Program::step(std::size_t index) {
  if (steps.size() <= index) steps.resize(index + 1);
  return steps[index];
}

void Program::send(std::size_t s, int peer, Chunk src) {
  step(s).ops.push_back({OpKind::kSend, peer, src, {}, channel, theirs()});
}
void Program::recv(std::size_t s, int peer, Chunk dst) {
  step(s).ops.push_back({OpKind::kRecv, peer, {}, dst, channel, theirs()});
}
void Program::recv_reduce(std::size_t s, int peer, Chunk dst) {
  step(s).ops.push_back({OpKind::kRecvReduce, peer, {}, dst, channel, theirs()});
}
void Program::copy(std::size_t s, Chunk src, Chunk dst) {
  step(s).ops.push_back({OpKind::kCopy, -1, src, dst, channel, channel});
}
void Program::reduce(std::size_t s, Chunk src, Chunk dst) {
  step(s).ops.push_back({OpKind::kReduce, -1, src, dst, channel, channel});
}
void Program::need_scratch(std::int64_t elements) { scratch = std::max(scratch, elements); }

void Program::compact(bool keep_empty_messages) {
  std::vector<Step> kept;
  for (auto& s : steps) {
    Step t;
    for (auto& op : s.ops) {
      bool message = op.kind == OpKind::kSend || op.kind == OpKind::kRecv || op.kind == OpKind::kRecvReduce;
      std::int64_t count = op.kind == OpKind::kSend ? op.src.count : op.dst.count;
      if (count > 0 || (message && keep_empty_messages)) t.ops.push_back(op);
    }
    if (!t.ops.empty()) kept.push_back(std::move(t));
  }
  steps = std::move(kept);
}

namespace {
// Disjoint, sorted element ranges [begin, end) of kData that hold their final owner's data.
class Written {
 public:
  void mark(std::int64_t lo, std::int64_t hi) {
    if (lo >= hi) return;
    auto it = ranges_.upper_bound(lo);
    if (it != ranges_.begin() && std::prev(it)->second >= lo) --it;
    while (it != ranges_.end() && it->first <= hi) {
      lo = std::min(lo, it->first);
      hi = std::max(hi, it->second);
      it = ranges_.erase(it);
    }
    ranges_[lo] = hi;
  }
  // The parts of [lo, hi) not written yet.
  std::vector<std::pair<std::int64_t, std::int64_t>> missing(std::int64_t lo, std::int64_t hi) const {
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    auto it = ranges_.upper_bound(lo);
    if (it != ranges_.begin() && std::prev(it)->second > lo) --it;
    for (; it != ranges_.end() && it->first < hi && lo < hi; ++it) {
      if (it->first > lo) out.emplace_back(lo, std::min(it->first, hi));
      lo = std::max(lo, it->second);
    }
    if (lo < hi) out.emplace_back(lo, hi);
    return out;
  }

 private:
  std::map<std::int64_t, std::int64_t> ranges_;
};

Op copy_from_input(std::int64_t lo, std::int64_t hi) {
  return {OpKind::kCopy, -1, {Buf::kInput, lo, hi - lo}, {Buf::kData, lo, hi - lo}};
}
}  // namespace

Program read_input_first(Program p, std::int64_t n) {
  Written written;
  std::vector<Step> steps;
  for (Step& step : p.steps) {
    Step prelude;  // copies from the input, a step of their own before this one
    auto copy_missing = [&](const Chunk& c) {
      for (auto [lo, hi] : written.missing(c.offset, c.end())) {
        prelude.ops.push_back(copy_from_input(lo, hi));
        written.mark(lo, hi);
      }
    };
    auto untouched = [&](const Chunk& c) {
      auto m = written.missing(c.offset, c.end());
      return m.size() == 1 && m[0].first == c.offset && m[0].second == c.end();
    };
    // Reads a source: from the input when none of it was written, else complete it first.
    auto source = [&](Chunk& c) {
      if (c.buf != Buf::kData || c.count == 0) return;
      if (untouched(c)) c.buf = Buf::kInput; else copy_missing(c);
    };
    std::vector<Chunk> received;
    for (Op& op : step.ops) {
      switch (op.kind) {
        case OpKind::kSend: source(op.src); break;
        case OpKind::kCopy:
          source(op.src);
          if (op.dst.buf == Buf::kData) written.mark(op.dst.offset, op.dst.end());
          break;
        case OpKind::kReduce:
          source(op.src);
          if (op.dst.buf == Buf::kData) copy_missing(op.dst);
          break;
        case OpKind::kRecv:
          if (op.dst.buf == Buf::kData) received.push_back(op.dst);
          break;
        case OpKind::kRecvReduce:
          if (op.dst.buf != Buf::kData || op.dst.count == 0) break;
          if (untouched(op.dst)) op.src = {Buf::kInput, op.dst.offset, op.dst.count}; else copy_missing(op.dst);
          received.push_back(op.dst);
          break;
      }
    }
    for (const Chunk& c : received) written.mark(c.offset, c.end());
    if (!prelude.ops.empty()) steps.push_back(std::move(prelude));
    steps.push_back(std::move(step));
  }
  Step last;
  for (auto [lo, hi] : written.missing(0, n))
    last.ops.push_back(copy_from_input(lo, hi));
  if (!last.ops.empty()) steps.push_back(std::move(last));
  p.steps = std::move(steps);
  return p;
}

const std::vector<Collective>& all_collectives() {
  static const std::vector<Collective> all{Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce,
                                           Collective::kGather,    Collective::kScatter,   Collective::kAllGather,
                                           Collective::kReduceScatter, Collective::kAllToAll, Collective::kBarrier};
  return all;
}

const char* collective_name(Collective c) { return facts(c).name; }

Collective parse_collective(const std::string& name) {
  std::string known;
  for (Collective c : all_collectives()) {
    if (name == collective_name(c)) return c;
    known += (known.empty() ? "" : ", ") + std::string(collective_name(c));
  }
  throw ConfigError("unknown collective '" + name + "' (known: " + known + ")");
}

std::int64_t block_begin(std::int64_t n, int parts, int i) {
  // floor(n * i / parts) without overflow: n = q * parts + r.
  std::int64_t q = n / parts, r = n % parts;
  return q * i + (r * i) / parts;
}

std::size_t channel_count(const Program& p) {
  std::size_t channels = 1;
  for (const Step& s : p.steps)
    for (const Op& op : s.ops) channels = std::max<std::size_t>(channels, std::max(op.channel, op.peer_channel) + 1u);
  return channels;
}

ProgramStats stats(const Program& p) {
  ProgramStats s;
  s.steps = p.steps.size();
  for (const auto& step : p.steps)
    for (const auto& op : step.ops)
      if (op.kind == OpKind::kSend) {
        ++s.messages;
        s.elements_sent += op.src.count;
      }
  return s;
}

}  // namespace weft::algo
