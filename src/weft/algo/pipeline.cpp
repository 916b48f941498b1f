#include "weft/algo/pipeline.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

#include "weft/util/error.h"

namespace weft::algo {

PipeSchedule parse_pipe_schedule(const std::string& name) {
  if (name == "naive") return PipeSchedule::kNaive;
  if (name == "gpipe") return PipeSchedule::kGpipe;
  if (name == "1f1b") return PipeSchedule::k1F1B;
  if (name == "interleaved") return PipeSchedule::kInterleaved;
  if (name == "seed") return PipeSchedule::kUpdatePerMicroBatch;
  throw ConfigError("unknown pipeline schedule '" + name + "' (known: naive, gpipe, 1f1b, interleaved, seed)");
}

const char* pipe_schedule_name(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::kNaive: return "naive";
    case PipeSchedule::kGpipe: return "gpipe";
    case PipeSchedule::k1F1B: return "1f1b";
    case PipeSchedule::kInterleaved: return "interleaved";
    case PipeSchedule::kUpdatePerMicroBatch: return "seed";
  }
  return "?";
}

namespace {

// One forward or backward of (micro-batch, chunk) with its messages.
struct Unit {
  int micro, chunk;
};

void forward_unit(std::vector<PipeOp>& p, int stage, int stages, int chunks, Unit u) {
  const int v = u.chunk * stages + stage, last = stages * chunks - 1;
  if (v > 0) p.push_back({PipeOpKind::kRecvAct, u.micro, u.chunk, (stage + stages - 1) % stages});
  p.push_back({PipeOpKind::kForward, u.micro, u.chunk, -1});
  if (v < last) p.push_back({PipeOpKind::kSendAct, u.micro, u.chunk, (stage + 1) % stages});
}

void backward_unit(std::vector<PipeOp>& p, int stage, int stages, int chunks, Unit u) {
  const int v = u.chunk * stages + stage, last = stages * chunks - 1;
  if (v < last) p.push_back({PipeOpKind::kRecvGrad, u.micro, u.chunk, (stage + 1) % stages});
  p.push_back({PipeOpKind::kBackward, u.micro, u.chunk, -1});
  if (v > 0) p.push_back({PipeOpKind::kSendGrad, u.micro, u.chunk, (stage + stages - 1) % stages});
}

}  // namespace

std::vector<PipeOp> pipeline_program(PipeSchedule schedule, int stage, int stages, int micro_batches, int chunks) {
  if (stages < 1 || stage < 0 || stage >= stages) throw ConfigError("pipeline: stage out of range");
  if (micro_batches < 1) throw ConfigError("pipeline: at least one micro-batch");
  if (chunks < 1) throw ConfigError("pipeline: at least one model chunk per stage");
  if (schedule != PipeSchedule::kInterleaved && chunks != 1)
    throw ConfigError(std::string("pipeline: model chunks need the interleaved schedule, not ") + pipe_schedule_name(schedule));
  const int S = stages, M = micro_batches, s = stage;
  std::vector<PipeOp> p;
  switch (schedule) {
    case PipeSchedule::kNaive:
      for (int m = 0; m < M; ++m) {
        forward_unit(p, s, S, 1, {m, 0});
        backward_unit(p, s, S, 1, {m, 0});
      }
      break;
    case PipeSchedule::kGpipe:
    case PipeSchedule::kUpdatePerMicroBatch:
      for (int m = 0; m < M; ++m) forward_unit(p, s, S, 1, {m, 0});
      for (int m = 0; m < M; ++m) {
        backward_unit(p, s, S, 1, {m, 0});
        if (schedule == PipeSchedule::kUpdatePerMicroBatch) p.push_back({PipeOpKind::kStep, m, 0, -1});
      }
      break;
    case PipeSchedule::k1F1B: {
      const int warm = std::min(S - s - 1, M);
      int f = 0, b = 0;
      while (f < warm) forward_unit(p, s, S, 1, {f++, 0});
      while (f < M) {
        forward_unit(p, s, S, 1, {f++, 0});
        backward_unit(p, s, S, 1, {b++, 0});
      }
      while (b < M) backward_unit(p, s, S, 1, {b++, 0});
      break;
    }
    case PipeSchedule::kInterleaved: {
      if (chunks < 2) throw ConfigError("pipeline: the interleaved schedule needs at least 2 model chunks per stage");
      if (M % S != 0)
        throw ConfigError("pipeline: the interleaved schedule needs micro-batches (" + std::to_string(M) +
                          ") divisible by stages (" + std::to_string(S) + ")");
      const int v = chunks, total = M * v;
      // Unit k: micro-batches go in groups of S, each group through chunk 0, 1, ... in turn.
      auto unit = [&](int k, bool backward) {
        int group = k / (S * v), in_group = k % (S * v);
        int chunk = in_group / S;
        if (backward) chunk = v - 1 - chunk;
        return Unit{group * S + in_group % S, chunk};
      };
      const int warm = std::min((S - s - 1) * 2 + (v - 1) * S, total);
      int f = 0, b = 0;
      while (f < warm) forward_unit(p, s, S, v, unit(f++, false));
      while (f < total) {
        forward_unit(p, s, S, v, unit(f++, false));
        backward_unit(p, s, S, v, unit(b++, true));
      }
      while (b < total) backward_unit(p, s, S, v, unit(b++, true));
      break;
    }
  }
  return p;
}

PipeTiming simulate_pipeline(PipeSchedule schedule, int stages, int micro_batches, int chunks, double forward,
                             double backward) {
  const int S = stages, V = stages * chunks;
  std::vector<std::vector<PipeOp>> prog(S);
  for (int s = 0; s < S; ++s) prog[s] = pipeline_program(schedule, s, S, micro_batches, chunks);
  // A message: what it carries and when it was sent.
  struct Msg {
    bool grad;
    int micro, vstage;  // the virtual stage that produced it
    double at;
  };
  std::map<std::pair<int, int>, std::deque<Msg>> wire;  // (from, to) -> in flight, in order
  std::vector<std::size_t> pc(S, 0);
  std::vector<double> clock(S, 0);
  PipeTiming t;
  t.busy.assign(S, 0);
  std::map<std::pair<int, int>, int> forwards, backwards;  // (micro, vstage) -> count
  std::vector<int> in_flight(S, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < S; ++s) {
      while (pc[s] < prog[s].size()) {
        const PipeOp& op = prog[s][pc[s]];
        const int vs = op.chunk * S + s;
        if (op.kind == PipeOpKind::kRecvAct || op.kind == PipeOpKind::kRecvGrad) {
          auto& q = wire[{op.peer, s}];
          if (q.empty()) break;  // wait
          const Msg& m = q.front();
          bool grad = op.kind == PipeOpKind::kRecvGrad;
          int want_from = grad ? vs + 1 : vs - 1;
          if (m.grad != grad || m.micro != op.micro || m.vstage != want_from)
            throw InternalError(std::string("pipeline ") + pipe_schedule_name(schedule) + ": stage " + std::to_string(s) +
                                " expects " + (grad ? "gradients" : "activations") + " of micro-batch " +
                                std::to_string(op.micro) + " from stage " + std::to_string(op.peer) +
                                " but the next message there is another");
          clock[s] = std::max(clock[s], m.at);
          q.pop_front();
        } else if (op.kind == PipeOpKind::kSendAct || op.kind == PipeOpKind::kSendGrad) {
          wire[{s, op.peer}].push_back({op.kind == PipeOpKind::kSendGrad, op.micro, vs, clock[s]});
        } else if (op.kind == PipeOpKind::kForward) {
          if (vs > 0 && !forwards.count({op.micro, vs - 1}))
            throw InternalError("pipeline: forward before its input exists");
          if (++forwards[{op.micro, vs}] != 1) throw InternalError("pipeline: a forward runs twice");
          clock[s] += forward;
          t.busy[s] += forward;
          t.peak_in_flight = std::max(t.peak_in_flight, ++in_flight[s]);
        } else if (op.kind == PipeOpKind::kBackward) {
          if (!forwards.count({op.micro, vs})) throw InternalError("pipeline: backward before forward");
          if (vs < V - 1 && !backwards.count({op.micro, vs + 1}))
            throw InternalError("pipeline: backward before its output gradient exists");
          if (++backwards[{op.micro, vs}] != 1) throw InternalError("pipeline: a backward runs twice");
          clock[s] += backward;
          t.busy[s] += backward;
          --in_flight[s];
        }
        ++pc[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < S; ++s)
    if (pc[s] < prog[s].size())
      throw InternalError(std::string("pipeline ") + pipe_schedule_name(schedule) + ": deadlock at stage " + std::to_string(s));
  for (const auto& [pair, q] : wire)
    if (!q.empty()) throw InternalError("pipeline: a message was never received");
  for (int m = 0; m < micro_batches; ++m)
    for (int v = 0; v < V; ++v)
      if (!forwards.count({m, v}) || !backwards.count({m, v})) throw InternalError("pipeline: a unit never ran");
  t.makespan = *std::max_element(clock.begin(), clock.end());
  double busy = 0;
  for (double b : t.busy) busy += b;
  t.bubble = t.makespan > 0 ? 1 - busy / (S * t.makespan) : 0;
  return t;
}

}  // namespace weft::algo
