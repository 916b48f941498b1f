#include "weft/plan/workload.h"

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "weft/algo/collective_facts.h"
#include "weft/algo/registry.h"
#include "weft/algo/trace_files.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::plan {
namespace {

// One stream of one rank's records: 0 the compute and what waits on it, 1 the data-parallel
// communication that overlaps it.
struct Writer {
  std::FILE* f = nullptr;
  int rank = 0, stream = 0;
  double t = 0;  // seconds on this stream's timeline
  std::int64_t records = 0;
  double bytes_sent = 0;
  std::string held;  // stream 1's lines, written after stream 0's
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
  if (w.stream > 0)
    w.held += "{" + body + ",\"rank\":" + std::to_string(w.rank) + ",\"stream\":" + std::to_string(w.stream) +
              ",\"start_us\":" + std::to_string(start) + ",\"end_us\":" + std::to_string(end) + "}\n";
  else
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

// Megatron's interleaved 1F1B (chunks > 1): stage i runs min(2 (p - 1 - i) + (v - 1) p, m v)
// forwards first; virtual micro-batch k is chunk (k / p) mod v forward and v - 1 - that
// backward (their micro-batch: p (k / (p v)) + k mod p).
std::vector<StagePass> stage_passes(EmitOrder order, int stages, int stage, std::int64_t micro, int chunks) {
  std::vector<StagePass> out;
  const std::int64_t p = stages;
  if (chunks <= 1) {
    const std::int64_t warm = order == EmitOrder::kGPipe ? micro : std::min<std::int64_t>(p - 1 - stage, micro);
    for (std::int64_t k = 0; k < warm; ++k) out.push_back({0, true});
    for (std::int64_t k = 0; k < micro - warm; ++k) out.push_back({0, true}), out.push_back({0, false});
    for (std::int64_t k = 0; k < warm; ++k) out.push_back({0, false});
    return out;
  }
  const std::int64_t total = micro * chunks, v = chunks;
  const std::int64_t warm = std::min<std::int64_t>(2 * (p - 1 - stage) + (v - 1) * p, total);
  auto forward = [&](std::int64_t k) { return StagePass{static_cast<int>((k / p) % v), true}; };
  auto backward = [&](std::int64_t k) { return StagePass{static_cast<int>(v - 1 - (k / p) % v), false}; };
  for (std::int64_t k = 0; k < warm; ++k) out.push_back(forward(k));
  for (std::int64_t k = 0; k < total - warm; ++k) out.push_back(forward(warm + k)), out.push_back(backward(k));
  for (std::int64_t k = total - warm; k < total; ++k) out.push_back(backward(k));
  return out;
}

void check_emit_folder(const std::string& dir, int world) {
  check_output_folder(dir, "--emit-workload");
  if (const std::optional<std::string> past = algo::trace_files_past(dir, world))
    throw ConfigError("--emit-workload: " + dir + " already holds " + *past + " of another workload, past this plan's " +
                      std::to_string(world) + (world == 1 ? " rank" : " ranks") +
                      "; the replay would mix the two: remove them or choose another folder");
}

EmittedWorkload emit_workload(const PlanReport& plan, const std::string& dir, EmitOrder order) {
  const PlanInput& in = plan.input;
  if (in.parameters) throw ConfigError("--emit-workload needs a transformer model (a preset or dimensions), not --params");
  if (in.global_batch < 1 || !plan.iteration) throw ConfigError("--emit-workload needs --global-batch (sequences per iteration)");
  const TransformerSpec& m = in.model;
  const Layout& l = in.layout;
  const int tp = l.tp, cp = l.cp, pp = l.pp, dp = l.dp, ep = l.ep, chunks = l.interleave, world = l.gpus();
  if (world > 1 << 16) throw ConfigError("--emit-workload: at most 65536 ranks");
  if (m.seq_len % cp != 0) throw ConfigError("--emit-workload: --cp must divide the sequence of " + std::to_string(m.seq_len));
  const std::int64_t micro = std::max<std::int64_t>(1, in.global_batch / (l.micro_batch * dp));
  if (chunks > 1) {
    if (order == EmitOrder::kGPipe) throw ConfigError("--emit-schedule gpipe runs one chunk per stage: not with --interleave");
    if (micro % pp != 0)
      throw ConfigError("--emit-workload with --interleave needs the micro-batches per pipeline (" + std::to_string(micro) +
                        ") to be a multiple of --pp (Megatron's interleaved schedule)");
    if (m.layers % (static_cast<std::int64_t>(pp) * chunks) != 0 || l.first_stage_layers > 0)
      throw ConfigError("--emit-workload with --interleave needs the layers to divide evenly over --pp x --interleave chunks");
  }
  const std::vector<std::int64_t> layers_of_stage = stage_layers(m, l);
  const std::int64_t tokens_mb = m.seq_len / cp * l.micro_batch;        // one GPU's share of a micro-batch's tokens
  const std::int64_t activation_bytes = tokens_mb * m.d_model * 2;       // its hidden states, 16-bit
  const std::int64_t p2p_bytes = activation_bytes / tp;                  // scattered over the tensor-parallel ranks
  // The compute model's kernel rate: the iteration's compute at that rate, the communication
  // as the traces send it. A layer's forward is a third of its training FLOPs (with full
  // recomputation a quarter: its backward runs the forward again).
  const double flops = plan.iteration->kernel_flops;
  const TokenFlops tf = token_flops(m, l);
  const double per_token_s = static_cast<double>(tokens_mb) / tp / flops;
  const double forward_share = l.full_recompute() ? 0.25 : 1.0 / 3;
  const Cluster& c = in.cluster;
  const LinkClass& tp_link = tp <= c.gpus_per_node ? c.nvlink : c.rail;
  const double tp_ar_s = ring_allreduce_seconds(static_cast<double>(activation_bytes), tp, tp_link);
  const double p2p_s = c.rail.latency_s + static_cast<double>(p2p_bytes) / c.rail.bytes_per_second;
  // Ring attention: each step passes a key-value block to the next context-parallel rank.
  const std::int64_t kv_block = tokens_mb * m.kv_cache_values() * 2 / tp;
  const LinkClass& cp_link = static_cast<std::int64_t>(tp) * cp <= c.gpus_per_node ? c.nvlink : c.rail;
  const double kv_s = cp_link.latency_s + static_cast<double>(kv_block) / cp_link.bytes_per_second;
  // Expert parallelism: top_k copies of each token (or the capacity's slots) to their experts and back.
  const auto a2a_block = static_cast<std::int64_t>(  // 16-bit elements per peer
      std::llround(static_cast<double>(activation_bytes / tp) * m.routed_copies() / static_cast<double>(ep) / 2));
  const LinkClass& ep_link = static_cast<std::int64_t>(tp) * ep <= c.gpus_per_node ? c.nvlink : c.rail;
  const double a2a_s = (ep - 1) * (ep_link.latency_s + static_cast<double>(a2a_block * 2) / ep_link.bytes_per_second);
  const auto grad_element = static_cast<std::int64_t>(gradient_bytes(in.precision));
  const bool sharded = sharded_states(in.precision, l);
  // The global layers of a stage's chunk.
  auto chunk_layers = [&](int stage, int chunk) {
    if (chunks == 1) {
      std::int64_t first = 0;
      for (int i = 0; i < stage; ++i) first += layers_of_stage[static_cast<std::size_t>(i)];
      return std::pair{first, layers_of_stage[static_cast<std::size_t>(stage)]};
    }
    const std::int64_t n = m.layers / (static_cast<std::int64_t>(pp) * chunks);
    return std::pair{(static_cast<std::int64_t>(chunk) * pp + stage) * n, n};
  };

  check_emit_folder(dir, world);
  make_directories(dir);
  EmittedWorkload out;
  out.ranks = world;
  for (int rank = 0; rank < world; ++rank) {
    const int tp_i = rank % tp, cp_i = rank / tp % cp, pp_i = rank / (tp * cp) % pp, dp_i = rank / (tp * cp * pp);
    auto rank_at = [&](int t, int x, int s, int d) { return t + tp * (x + cp * (s + pp * d)); };
    const std::string path = dir + "/" + algo::trace_file_name(rank);
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "w"), &std::fclose);
    if (!file) throw ConfigError("--emit-workload: cannot write " + path);
    Writer w, data;
    w.f = data.f = file.get(), w.rank = data.rank = rank, data.stream = 1;
    // The iteration starts at 0 on every rank: the replay keeps the compute before each
    // rank's first operation (docs/trace-format.md).
    std::fprintf(w.f, "{\"op\":\"mark\",\"name\":\"iteration\",\"rank\":%d,\"start_us\":0,\"end_us\":0}\n", rank);
    std::map<std::tuple<int, int, int, std::int64_t>, algo::Program> programs;  // (collective, index, size, count)
    auto collective = [&](const char* op, algo::Collective kind, std::vector<int> members, std::int64_t count,
                          std::int64_t element, const char* algorithm = "ring") {
      Collective col;
      col.op = op, col.algorithm = algorithm, col.members = std::move(members), col.count = count, col.element = element;
      col.dtype = element == 4 ? "f32" : "bf16";
      const int index = static_cast<int>(std::find(col.members.begin(), col.members.end(), rank) - col.members.begin());
      const int size = static_cast<int>(col.members.size());
      auto key = std::tuple{static_cast<int>(kind), index, size, count};
      auto found = programs.find(key);
      if (found == programs.end())
        found = programs.emplace(key, algo::build_program(kind, algorithm, index, size, algo::data_elements(kind, count, size))).first;
      col.program = found->second;
      return col;
    };
    // Replicas (the dp x cp ranks of one tensor and pipeline position) numbered
    // q = cp_i + cp dp_i: expert parallelism groups ep consecutive ones, and the ranks that
    // hold the same experts (q mod ep alike) average those experts' gradients.
    const int replica = cp_i + cp * dp_i;
    auto replica_rank = [&](int q) { return rank_at(tp_i, q % cp, pp_i, q / cp); };
    std::vector<int> tp_group, ep_group, dp_group, expert_dp_group;
    for (int i = 0; i < tp; ++i) tp_group.push_back(rank_at(i, cp_i, pp_i, dp_i));
    for (int i = 0; i < ep; ++i) ep_group.push_back(replica_rank(replica / ep * ep + i));
    for (int q = 0; q < dp * cp; ++q) {
      dp_group.push_back(replica_rank(q));
      if (q % ep == replica % ep) expert_dp_group.push_back(replica_rank(q));
    }
    const Collective tpc = tp > 1 ? collective("allreduce", algo::Collective::kAllReduce, tp_group, activation_bytes / 2, 2)
                                  : Collective{};
    const Collective a2a =
        ep > 1 ? collective("alltoall", algo::Collective::kAllToAll, ep_group, a2a_block, 2, "pairwise") : Collective{};
    const int cp_next = rank_at(tp_i, (cp_i + 1) % cp, pp_i, dp_i), cp_prev = rank_at(tp_i, (cp_i + cp - 1) % cp, pp_i, dp_i);
    double gap = 0;  // compute not yet written before the next record
    auto record = [&](double seconds, const std::string& body) {
      write_record(w, gap, seconds, body);
      gap = 0;
    };
    // Stream 1: data parallelism over the data x context parallel ranks (the experts over
    // the ranks holding the same experts), one bucket per layer; the first layer's bucket
    // holds the embedding, the last's the final norm and head. A layer's weights are
    // gathered before it computes (ZeRO 3), its gradients reduced once its last backward is
    // done (every backward under ZeRO 3). Issued when the compute reaches `at`, or to finish
    // by then (`by`); returns where stream 1's timeline is then (-1: nothing to do).
    auto data_op = [&](double at, bool gather, std::int64_t layer, bool by = false) {
      double done = -1;
      for (bool experts : {false, true}) {
        const std::vector<int>& group = experts ? expert_dp_group : dp_group;
        const std::int64_t params = bucket_parameters(m, l, layer, experts);
        const int g = static_cast<int>(group.size());
        if (params == 0 || g < 2) continue;
        const std::int64_t block = (params + g - 1) / g;
        const std::int64_t element = gather ? 2 : grad_element;
        const double bytes = static_cast<double>(params * element);
        Collective col = !sharded && l.zero < 3 ? collective("allreduce", algo::Collective::kAllReduce, group, params, element)
                         : gather ? collective("allgather", algo::Collective::kAllGather, group, block, element)
                                  : collective("reduce_scatter", algo::Collective::kReduceScatter, group, block, element);
        const double seconds = col.op == "allreduce" ? ring_allreduce_seconds(bytes, g, c.rail) : ring_half_seconds(bytes, g, c.rail);
        // Each after the stream's previous operation, and once the compute (stream 0) has
        // reached the point it was issued at, however late the pipeline's waits make it
        // there ("after").
        const double start = std::max(0.0, by ? at - seconds : at);
        const std::string after = ",\"after\":{\"stream\":0,\"us\":" + std::to_string(std::llround(start * 1e6)) + "}";
        write_record(data, std::max(0.0, start - data.t), seconds, collective_body(col, data) + after);
        done = data.t;
      }
      return done;
    };
    // Sharded states (ZeRO 1 and 2) all-gather the weights the step updated behind the next
    // iteration's first forward: in the steady state those gathers open the iteration.
    if (sharded && l.zero < 3) {
      for (int chunk = 0; chunk < chunks; ++chunk) {
        const auto [first_layer, count] = chunk_layers(pp_i, chunk);
        for (std::int64_t i = 0; i < count; ++i) data_op(0, true, first_layer + i);
      }
    }
    std::vector<std::int64_t> backwards_left(static_cast<std::size_t>(chunks), micro);
    const auto passes = stage_passes(order, pp, pp_i, micro, chunks);
    // The layer a pass computes i-th.
    auto pass_layer = [&](const StagePass& pass, std::int64_t i) {
      const auto [first_layer, count] = chunk_layers(pp_i, pass.chunk);
      return pass.forward ? first_layer + i : first_layer + count - 1 - i;
    };
    double ready = -1;  // where stream 1 has the next layer's weights (ZeRO 3; -1: not asked for yet)
    for (std::size_t pi = 0; pi < passes.size(); ++pi) {
      const StagePass& pass = passes[pi];
      const int before = pp_i > 0 ? rank_at(tp_i, cp_i, pp_i - 1, dp_i) : pass.chunk > 0 ? rank_at(tp_i, cp_i, pp - 1, dp_i) : -1;
      const int after = pp_i + 1 < pp ? rank_at(tp_i, cp_i, pp_i + 1, dp_i) : pass.chunk + 1 < chunks ? rank_at(tp_i, cp_i, 0, dp_i) : -1;
      const int from = pass.forward ? before : after, to = pass.forward ? after : before;
      if (from >= 0) record(p2p_s, p2p_body("recv", from, p2p_bytes, w));
      const bool last_backward = !pass.forward && --backwards_left[static_cast<std::size_t>(pass.chunk)] == 0;
      const auto [first_layer, count] = chunk_layers(pp_i, pass.chunk);
      // The last chunk of the model ends with the head: its forward after the layers, its
      // backward before them (never recomputed: a third forward).
      const bool head = pp_i == pp - 1 && pass.chunk == chunks - 1;
      const double head_s = head ? tf.head * per_token_s : 0;
      if (!pass.forward) gap += head_s * 2 / 3;
      for (std::int64_t i = 0; i < count; ++i) {
        const std::int64_t layer = pass_layer(pass, i);
        const bool moe = m.is_moe_layer(layer);
        const double layer_s = (moe ? tf.moe_layer : tf.dense_layer) * per_token_s;
        const double compute = layer_s * (pass.forward ? forward_share : 1 - forward_share);
        if (l.zero >= 3) {
          // The layer's kernels wait for its gathered weights (a mark that waits for stream
          // 1): where the gathers fall behind, the compute stalls until they are done. The
          // iteration's first layer's weights are gathered to arrive as it starts; each
          // layer's compute then prefetches the next one's (the next pass's first, after a
          // pass's last), ahead of its own gradients' reduction.
          if (ready < 0) ready = data_op(w.t + gap, true, layer, true);
          if (ready >= 0) {
            w.t += gap, gap = 0;
            const long long stop = std::llround(w.t * 1e6);
            w.t = std::max(w.t, ready);
            std::fprintf(w.f,
                         "{\"op\":\"mark\",\"name\":\"weights\",\"after\":{\"stream\":1,\"us\":%lld},\"rank\":%d,"
                         "\"start_us\":%lld,\"end_us\":%lld}\n",
                         std::llround(ready * 1e6), rank, stop, std::llround(w.t * 1e6));
            ++w.records;
          }
          const bool last = i + 1 == count;
          ready = !last ? data_op(w.t + gap, true, pass_layer(pass, i + 1))
                  : pi + 1 < passes.size() ? data_op(w.t + gap, true, pass_layer(passes[pi + 1], 0))
                                           : -1;
        }
        // Megatron: the attention block and the MLP block each end with an all-reduce (a
        // backward that recomputes the forward runs its two first); ring attention passes
        // the key-value blocks around inside attention, backward twice (and their gradients).
        const int reductions = !pass.forward && l.full_recompute() ? 2 : 1;
        for (int half = 0; half < 2; ++half) {
          gap += compute / 2;
          if (half == 0)
            for (int step = 0; step < (cp - 1) * (pass.forward ? 1 : 2); ++step) {
              record(kv_s, p2p_body("send", cp_next, kv_block, w));
              record(kv_s, p2p_body("recv", cp_prev, kv_block, w));
            }
          if (half == 1 && moe && ep > 1)
            for (int k = 0; k < 2; ++k) record(a2a_s, collective_body(a2a, w));  // dispatch and combine
          if (tp > 1)
            for (int k = 0; k < reductions; ++k) record(tp_ar_s, collective_body(tpc, w));
        }
        if (!pass.forward && (l.zero >= 3 || last_backward)) data_op(w.t + gap, false, layer);
      }
      if (pass.forward) gap += head_s / 3;
      if (to >= 0) record(p2p_s, p2p_body("send", to, p2p_bytes, w));
    }
    std::fputs(data.held.c_str(), w.f);
    if (std::ferror(w.f)) throw ConfigError("--emit-workload: writing " + path + " failed");
    out.records += w.records + data.records;
    if (rank == 0) {
      out.bytes_per_rank = w.bytes_sent + data.bytes_sent;
      out.iteration_s = std::max(w.t, data.t);
    }
  }
  return out;
}

}  // namespace weft::plan
