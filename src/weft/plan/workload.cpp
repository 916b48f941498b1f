#include "weft/plan/workload.h"

#include <cmath>
#include <cstdio>
#include <memory>

#include "weft/algo/registry.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::plan {
namespace {

struct Writer {
  std::FILE* f = nullptr;
  int rank = 0;
  double t = 0;  // seconds on this rank's timeline
  std::int64_t records = 0;
  double bytes_sent = 0;
  ~Writer() {
    if (f) std::fclose(f);
  }
};

std::string ranks_list(const std::vector<int>& v, const char* sep) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(v[i]);
  }
  return s;
}

std::string steps_json(const algo::Program& p, const std::vector<int>& members, std::int64_t element, double& sent) {
  std::string s = "[";
  bool first_step = true;
  for (const algo::Step& step : p.steps) {
    if (!first_step) s += ',';
    first_step = false;
    s += '[';
    bool first_send = true;
    for (const algo::Op& op : step.ops) {
      if (op.kind != algo::OpKind::kSend) continue;
      std::int64_t bytes = op.src.count * element;
      sent += static_cast<double>(bytes);
      if (!first_send) s += ',';
      first_send = false;
      s += "{\"bytes\":";
      s += std::to_string(bytes);
      s += ",\"to\":";
      s += std::to_string(members[op.peer]);
      s += '}';
    }
    s += ']';
  }
  return s + "]";
}

void write_record(Writer& w, double gap_s, double duration_s, const std::string& body) {
  w.t += gap_s;
  long long start = std::llround(w.t * 1e6);
  w.t += duration_s;
  long long end = std::llround(w.t * 1e6);
  std::fprintf(w.f, "{%s,\"rank\":%d,\"start_us\":%lld,\"end_us\":%lld}\n", body.c_str(), w.rank, start, end);
  ++w.records;
}

struct Collective {
  std::string op, algorithm;
  std::vector<int> members;
  std::int64_t count = 0, element = 2;
  const char* dtype = "bf16";
  algo::Program program;
};

std::string collective_body(const Collective& c, Writer& w) {
  std::string body = "\"op\":\"" + c.op + "\",\"algorithm\":\"" + c.algorithm + "\",\"group\":\"group[" +
                     ranks_list(c.members, ", ") + "]\",\"group_ranks\":[" + ranks_list(c.members, ",") +
                     "],\"dtype\":\"" + c.dtype + "\",\"reduce\":\"sum\",\"count\":" + std::to_string(c.count) +
                     ",\"bytes\":" + std::to_string(c.count * c.element) + ",\"steps\":" +
                     steps_json(c.program, c.members, c.element, w.bytes_sent);
  return body;
}

std::string p2p_body(const char* op, int peer, std::int64_t bytes, Writer& w) {
  std::string steps = "[]";
  if (op[0] == 's') {
    steps = "[[{\"bytes\":" + std::to_string(bytes) + ",\"to\":" + std::to_string(peer) + "}]]";
    w.bytes_sent += static_cast<double>(bytes);
  }
  return std::string("\"op\":\"") + op + "\",\"group\":\"world\",\"dtype\":\"bf16\",\"count\":" +
         std::to_string(bytes / 2) + ",\"bytes\":" + std::to_string(bytes) + ",\"peers\":[" + std::to_string(peer) +
         "],\"steps\":" + steps;
}

}  // namespace

EmitOrder parse_emit_order(const std::string& s) {
  if (s == "1f1b") return EmitOrder::kOneForwardOneBackward;
  if (s == "gpipe") return EmitOrder::kGPipe;
  throw ConfigError("unknown --emit-schedule '" + s + "' (known: 1f1b, gpipe)");
}

EmittedWorkload emit_workload(const PlanReport& plan, const std::string& dir, EmitOrder order) {
  const PlanInput& in = plan.input;
  if (in.parameters) throw ConfigError("--emit-workload needs a transformer model (a preset or dimensions), not --params");
  if (in.global_batch < 1) throw ConfigError("--emit-workload needs --global-batch (sequences per iteration)");
  const TransformerSpec& m = in.model;
  const Layout& l = in.layout;
  if (l.cp > 1 || l.ep > 1) throw ConfigError("--emit-workload writes tensor, pipeline and data parallelism only (not --cp or --ep)");
  const int tp = l.tp, pp = l.pp, dp = l.dp, world = l.gpus();
  if (world > 1 << 16) throw ConfigError("--emit-workload: at most 65536 ranks");
  const std::int64_t micro = std::max<std::int64_t>(1, in.global_batch / (l.micro_batch * dp));
  const std::vector<std::int64_t> layers_of_stage = stage_layers(m, l);
  const std::int64_t tokens_mb = m.seq_len * l.micro_batch;
  const std::int64_t activation_bytes = tokens_mb * m.d_model * 2;  // one micro-batch's hidden states, 16-bit
  const std::int64_t p2p_bytes = activation_bytes / tp;              // scattered over the tensor-parallel ranks
  if (!plan.iteration) throw ConfigError("--emit-workload needs --global-batch (sequences per iteration)");
  // The compute model's kernel rate: the iteration's compute at that rate, the communication
  // as the traces send it.
  const double flops = plan.iteration->kernel_flops;
  // Compute per layer and micro-batch on one GPU: a layer's share of the training FLOPs,
  // a third forward and two thirds backward (with recomputation: a quarter and three quarters).
  const double layer_s = hardware_flops_per_token(m, l) / static_cast<double>(m.layers) *
                         static_cast<double>(tokens_mb) / tp / flops;
  const double fwd_s = layer_s * (l.full_recompute() ? 0.25 : 1.0 / 3);
  const double bwd_s = layer_s - fwd_s;
  const Cluster& c = in.cluster;
  const LinkClass& tp_link = tp <= c.gpus_per_node ? c.nvlink : c.rail;
  const double tp_ar_s = ring_allreduce_seconds(static_cast<double>(activation_bytes), tp, tp_link);
  const double p2p_s = c.rail.latency_s + static_cast<double>(p2p_bytes) / c.rail.bytes_per_second;
  ParameterCount pc = count_parameters(m);
  const auto grad_element = static_cast<std::int64_t>(gradient_bytes(in.precision));

  make_directories(dir);
  EmittedWorkload out;
  out.ranks = world;
  for (int rank = 0; rank < world; ++rank) {
    const int tp_i = rank % tp, pp_i = rank / tp % pp, dp_i = rank / (tp * pp);
    Writer w;
    w.rank = rank;
    std::string path = dir + "/rank-" + std::to_string(rank) + ".jsonl";
    w.f = std::fopen(path.c_str(), "w");
    if (!w.f) throw ConfigError("--emit-workload: cannot write " + path);
    // The iteration starts at 0 on every rank: the replay keeps the compute before each
    // rank's first operation (docs/trace-format.md).
    std::fprintf(w.f, "{\"op\":\"mark\",\"name\":\"iteration\",\"rank\":%d,\"start_us\":0,\"end_us\":0}\n", rank);
    Collective tpc;
    if (tp > 1) {
      tpc.op = "allreduce";
      tpc.algorithm = "ring";
      for (int i = 0; i < tp; ++i) tpc.members.push_back(rank - tp_i + i);
      tpc.count = activation_bytes / 2;
      tpc.program = algo::build_program(algo::Collective::kAllReduce, "ring", tp_i, tp, tpc.count);
    }
    const int prev = pp_i > 0 ? rank - tp : -1, next = pp_i + 1 < pp ? rank + tp : -1;
    const std::int64_t stage_layer_count = layers_of_stage[static_cast<std::size_t>(pp_i)];
    double gap = 0;
    auto layer_pass = [&](double compute_s) {
      // Megatron: the attention block and the MLP block each end with an all-reduce.
      for (std::int64_t layer = 0; layer < stage_layer_count; ++layer) {
        if (tp > 1) {
          write_record(w, gap + compute_s / 2, tp_ar_s, collective_body(tpc, w));
          write_record(w, compute_s / 2, tp_ar_s, collective_body(tpc, w));
          gap = 0;
        } else {
          gap += compute_s;
        }
      }
    };
    // One micro-batch through this stage: receive from `from`, compute, send to `to` (-1: none).
    auto stage_pass = [&](int from, int to, double seconds) {
      if (from >= 0) {
        write_record(w, gap, p2p_s, p2p_body("recv", from, p2p_bytes, w));
        gap = 0;
      }
      layer_pass(seconds);
      if (to >= 0) {
        write_record(w, gap, p2p_s, p2p_body("send", to, p2p_bytes, w));
        gap = 0;
      }
    };
    // Forward passes receive from the previous stage and send to the next; backward passes
    // the other way.
    const std::int64_t warm = order == EmitOrder::kGPipe ? micro : std::min<std::int64_t>(pp - 1 - pp_i, micro);
    for (std::int64_t mb = 0; mb < warm; ++mb) stage_pass(prev, next, fwd_s);
    for (std::int64_t mb = 0; mb < micro - warm; ++mb) {
      stage_pass(prev, next, fwd_s);
      stage_pass(next, prev, bwd_s);
    }
    for (std::int64_t mb = 0; mb < warm; ++mb) stage_pass(next, prev, bwd_s);
    if (dp > 1) {
      // The gradients of this GPU's parameters over the data-parallel group.
      std::int64_t params = (stage_layer_count * pc.block + (pp_i == 0 || pp_i == pp - 1 ? pc.embedding : 0)) / tp;
      Collective dpc;
      dpc.algorithm = "ring";
      for (int i = 0; i < dp; ++i) dpc.members.push_back(i * tp * pp + pp_i * tp + tp_i);
      dpc.element = grad_element;
      dpc.dtype = grad_element == 4 ? "f32" : "bf16";
      const double grad_bytes = static_cast<double>(params * grad_element);
      if (l.zero == 0) {
        dpc.op = "allreduce";
        dpc.count = params;
        dpc.program = algo::build_program(algo::Collective::kAllReduce, "ring", dp_i, dp, params);
        write_record(w, gap, ring_allreduce_seconds(grad_bytes, dp, c.rail), collective_body(dpc, w));
      } else {
        // ZeRO: reduce-scatter the gradients, all-gather the updated parameters (count: one block).
        std::int64_t block = (params + dp - 1) / dp;
        dpc.op = "reduce_scatter";
        dpc.count = block;
        dpc.program = algo::build_program(algo::Collective::kReduceScatter, "ring", dp_i, dp, block * dp);
        write_record(w, gap, ring_half_seconds(grad_bytes, dp, c.rail), collective_body(dpc, w));
        dpc.op = "allgather";
        dpc.program = algo::build_program(algo::Collective::kAllGather, "ring", dp_i, dp, block * dp);
        write_record(w, 0, ring_half_seconds(grad_bytes, dp, c.rail), collective_body(dpc, w));
      }
      gap = 0;
    }
    if (std::ferror(w.f)) throw ConfigError("--emit-workload: writing " + path + " failed");
    out.records += w.records;
    if (rank == 0) {
      out.bytes_per_rank = w.bytes_sent;
      out.iteration_s = w.t;
    }
  }
  return out;
}

}  // namespace weft::plan
