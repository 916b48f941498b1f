#include "weft/algo/program.h"

#include <algorithm>

#include "weft/util/error.h"

namespace weft::algo {

Step& Program::step(std::size_t index) {
  if (steps.size() <= index) steps.resize(index + 1);
  return steps[index];
}

void Program::send(std::size_t s, int peer, Chunk src) { step(s).ops.push_back({OpKind::kSend, peer, src, {}}); }
void Program::recv(std::size_t s, int peer, Chunk dst) { step(s).ops.push_back({OpKind::kRecv, peer, {}, dst}); }
void Program::recv_reduce(std::size_t s, int peer, Chunk dst) {
  step(s).ops.push_back({OpKind::kRecvReduce, peer, {}, dst});
}
void Program::copy(std::size_t s, Chunk src, Chunk dst) { step(s).ops.push_back({OpKind::kCopy, -1, src, dst}); }
void Program::reduce(std::size_t s, Chunk src, Chunk dst) { step(s).ops.push_back({OpKind::kReduce, -1, src, dst}); }
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

const std::vector<Collective>& all_collectives() {
  static const std::vector<Collective> all{Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce,
                                           Collective::kGather,    Collective::kScatter,   Collective::kAllGather,
                                           Collective::kReduceScatter, Collective::kAllToAll, Collective::kBarrier};
  return all;
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "allreduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
    case Collective::kAllGather: return "allgather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "alltoall";
    case Collective::kBarrier: return "barrier";
  }
  return "?";
}

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
