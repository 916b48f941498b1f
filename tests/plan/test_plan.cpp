// The planner against published and seed figures.
#include <gtest/gtest.h>

#include "weft/plan/estimates.h"
#include "weft/plan/model_spec.h"
#include "weft/util/error.h"

using namespace weft;
using namespace weft::plan;

TEST(Plan, Gpt3ParameterCountMatchesTheNotes) {
  ParameterCount c = count_parameters(preset("gpt3-175b"));
  const std::int64_t d = 12288;
  EXPECT_EQ(c.attention, 4 * d * d + 4 * d);          // 604,028,928
  EXPECT_EQ(c.ffn, 8 * d * d + 5 * d);                // 1,208,020,992
  EXPECT_EQ(c.block, 1812099072);                     // 12 d^2 + 13 d
  EXPECT_EQ(c.blocks, 173961510912);                  // x 96
  EXPECT_EQ(c.embedding, 617558016 + 25165824);       // 50,257 x d tokens + 2,048 x d positions
  EXPECT_EQ(c.total, 174604259328);                   // about 174.6B ("175B")
}

TEST(Plan, OtherPresets) {
  EXPECT_EQ(count_parameters(preset("gpt2-124m")).total, 124439808);  // GPT-2 small, tied head
  EXPECT_EQ(count_parameters(preset("llama3-8b")).total, 8030261248);
  EXPECT_NEAR(count_parameters(preset("llama3-70b")).total / 1e9, 70.55, 0.01);
  EXPECT_NEAR(count_parameters(preset("llama3-405b")).total / 1e9, 405.85, 0.05);
  EXPECT_THROW(preset("gpt5"), ConfigError);
}

// The ZeRO paper (Rajbhandari et al. 2020), figure 1: 7.5B parameters, 64-way data
// parallelism, mixed-precision Adam (K = 12): 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per GPU.
TEST(Plan, ZeroPaperMemoryExample) {
  Layout l;
  l.dp = 64;
  auto gb = [&](int stage) {
    l.zero = stage;
    MemoryBreakdown m = state_memory(7.5e9, Precision::kMixedAdam, l);
    return (m.weights + m.gradients + m.optimizer) / 1e9;
  };
  EXPECT_NEAR(gb(0), 120.0, 0.05);
  EXPECT_NEAR(gb(1), 31.4, 0.05);
  EXPECT_NEAR(gb(2), 16.6, 0.05);
  EXPECT_NEAR(gb(3), 1.9, 0.05);
}

// Seed 002 chapter 13: 8B needs about 16 GB, 70B about 140 GB (two 80 GB GPUs at least),
// 405B about 810 GB. 810 GB on 80 GB GPUs needs 11 (the text says "at least 10").
TEST(Plan, Seed002ModelSizes) {
  Layout l;
  const double gpu = 80e9;
  MemoryBreakdown m8 = state_memory(8e9, Precision::kFp16Weights, l);
  MemoryBreakdown m70 = state_memory(70e9, Precision::kFp16Weights, l);
  MemoryBreakdown m405 = state_memory(405e9, Precision::kFp16Weights, l);
  EXPECT_DOUBLE_EQ(m8.total(), 16e9);
  EXPECT_DOUBLE_EQ(m70.total(), 140e9);
  EXPECT_DOUBLE_EQ(m405.total(), 810e9);
  EXPECT_EQ(min_gpus(m8.total(), gpu), 1);
  EXPECT_EQ(min_gpus(m70.total(), gpu), 2);
  EXPECT_EQ(min_gpus(m405.total(), gpu), 11);
  EXPECT_GT(min_gpus(m405.total(), gpu), 8);  // more than one 8-GPU server
}

// Narayanan et al. 2021, section 5.1: GPT-3 175B on 300B tokens with 1024 A100s at
// 140 TFLOP/s each takes about 34 days.
TEST(Plan, MegatronEndToEndEstimate) {
  double days = training_seconds(300e9, 175e9, 1024, 140e12, true) / 86400.0;
  EXPECT_NEAR(days, 34.0, 34.0 * 0.05);
}

// Narayanan et al. 2021, table 1, the 145.6B row: 96 heads, hidden 12,288, 80 layers,
// tensor parallel 8, pipeline parallel 8, 1,536 GPUs, batch 2,304, 148 TFLOP/s per GPU.
TEST(Plan, MegatronTableOneRowFitsOn80GB) {
  TransformerSpec m = preset("gpt3-175b");
  m.layers = 80;
  m.vocab = 51200;
  EXPECT_NEAR(count_parameters(m).total / 1e9, 145.6, 0.05);
  Layout l;
  l.tp = 8, l.pp = 8, l.dp = 1536 / 64;
  l.micro_batch = 1;
  l.micro_batches = 2304 / l.dp;  // micro-batches per pipeline and iteration
  l.recompute = true;
  MemoryBreakdown mem = training_memory(m, Precision::kMixedAdam, l);
  EXPECT_LT(mem.total(), 80e9) << "bytes per GPU: " << mem.total();
  EXPECT_GT(mem.total(), 30e9);  // 16 bytes x 2.3B parameters at least
  // Aggregate throughput: 148 TFLOP/s x 1,536 = 227 PFLOP/s (the table: 227.1).
  EXPECT_NEAR(148e12 * 1536 / 1e15, 227.1, 0.5);
  // Without recomputation the same layout does not fit.
  l.recompute = false;
  EXPECT_GT(training_memory(m, Precision::kMixedAdam, l).total(), 80e9);
}

// Seed 002 chapter 8: 350 W x 50,000 GPUs x 60 days (1,440 h) at $0.10/kWh = $2,520,000.
TEST(Plan, Seed002PowerBill) {
  EXPECT_DOUBLE_EQ(energy_kwh(350, 50000, 1440), 25200000.0);
  EXPECT_NEAR(energy_cost(350, 50000, 1440, 0.10), 2520000.0, 1e-6);
}

// Seed 004: CosmoFlow needs 65 GB/s per PFLOP/s; at 35-50 TFLOP/s per V100 that is
// 2.275-3.250 GB/s per GPU and 18.2-26 GB/s per 8-GPU node.
TEST(Plan, Seed004StorageBandwidth) {
  const double bytes_per_flop = 65e9 / 1e15;
  EXPECT_NEAR(storage_bytes_per_second(bytes_per_flop, 35e12) / 1e9, 2.275, 1e-9);
  EXPECT_NEAR(storage_bytes_per_second(bytes_per_flop, 50e12) / 1e9, 3.250, 1e-9);
  EXPECT_NEAR(8 * storage_bytes_per_second(bytes_per_flop, 35e12) / 1e9, 18.2, 1e-9);
  EXPECT_NEAR(8 * storage_bytes_per_second(bytes_per_flop, 50e12) / 1e9, 26.0, 1e-9);
}

// Seed 004's dataset table at 4 bytes per token.
TEST(Plan, Seed004DatasetSizes) {
  EXPECT_DOUBLE_EQ(dataset_bytes(300e9, 4), 1.2e12);   // GPT-3
  EXPECT_DOUBLE_EQ(dataset_bytes(2.0e12, 4), 8e12);    // LLaMA-2
  EXPECT_DOUBLE_EQ(dataset_bytes(180e9, 4), 720e9);    // OPT-175
  EXPECT_NEAR(dataset_bytes(260e9, 3.41) / 1e9, 886.6, 0.05);  // the Pile
}

TEST(Plan, ActivationMemoryAndKvCache) {
  TransformerSpec m = preset("gpt3-175b");
  Layout l;
  l.tp = 8;
  l.pp = 96;  // one layer per stage
  l.micro_batches = 1;
  const double s = 2048, h = 12288, a = 96;
  MemoryBreakdown plain = training_memory(m, Precision::kMixedAdam, l);
  EXPECT_NEAR(plain.activations, s * h * (10 + 24.0 / 8 + 5 * a * s / (h * 8)), 1.0);
  l.sequence_parallel = true;
  EXPECT_NEAR(training_memory(m, Precision::kMixedAdam, l).activations, s * h * (34 + 5 * a * s / h) / 8, 1.0);
  // KV cache of Llama-3 8B, 8,192 tokens, batch 1, fp16: 2 x 32 x 8 x 128 x 8192 x 2 = 1 GiB.
  EXPECT_DOUBLE_EQ(kv_cache_bytes(preset("llama3-8b"), 8192, 1), 1073741824.0);
  // Training FLOPs per token: 6 N plus attention.
  TransformerSpec g = preset("gpt3-175b");
  EXPECT_NEAR(training_flops_per_token(g, false) / (6 * 174604259328.0), 1.0, 0.03);
  EXPECT_THROW(training_memory(g, Precision::kMixedAdam, Layout{1, 200, 1}), ConfigError);
}

#include "weft/plan/comm_model.h"

TEST(PlanComm, AlphaBetaFormulasAndBubble) {
  LinkClass link{10e9, 5e-6};
  // Ring all-reduce of 1 GB over 8 ranks: 14 alpha + 2 x 7/8 x 1 GB / 10 GB/s.
  EXPECT_NEAR(ring_allreduce_seconds(1e9, 8, link), 14 * 5e-6 + 1.75e9 / 10e9, 1e-12);
  EXPECT_NEAR(ring_half_seconds(1e9, 8, link), 7 * 5e-6 + 0.875e9 / 10e9, 1e-12);
  EXPECT_EQ(ring_allreduce_seconds(1e9, 1, link), 0.0);
  // The bubble (p - 1) / (m + p - 1): 4 stages, 8 micro-batches: 3/11.
  EXPECT_DOUBLE_EQ(bubble_fraction(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(1, 8), 0.0);
  EXPECT_THROW(bubble_fraction(0, 8), ConfigError);
}

TEST(PlanComm, IterationEstimateForGpt3) {
  TransformerSpec m = preset("gpt3-175b");
  Layout l;
  l.tp = 8, l.pp = 16, l.dp = 8, l.micro_batch = 1, l.recompute = true;
  Cluster c;
  IterationEstimate e = estimate_iteration(m, Precision::kMixedAdam, l, c, 1536, 140e12);
  const double act = 2048.0 * 12288 * 2;  // one micro-batch of hidden states, 16-bit
  const double micro = 1536 / 8;          // per pipeline
  EXPECT_NEAR(e.tensor.bytes, 4 * 6 * micro * 2 * 7.0 / 8 * act, 1.0);  // 6 layers per stage
  EXPECT_STREQ(e.tensor.link, "nvlink");
  EXPECT_NEAR(e.pipeline.bytes, 2 * micro * act / 8, 1.0);
  EXPECT_NEAR(e.bubble, 15.0 / (192 + 15), 1e-12);
  EXPECT_GT(e.data.seconds, 0);
  EXPECT_GT(e.iteration_no_overlap_s, e.iteration_overlap_s);
  // Compute per iteration: 1,536 x 2,048 tokens x FLOPs per token / (1,024 GPUs x 140 TFLOP/s).
  EXPECT_NEAR(e.compute_s, 1536.0 * 2048 * training_flops_per_token(m, true) / (1024 * 140e12), 1e-9);
  // Compute dominates (about 31.5 s); the bubble adds 15/192 of it, tensor parallelism less.
  EXPECT_NEAR(e.compute_s, 31.5, 0.1);
  EXPECT_NEAR(e.bubble_s, e.compute_s * 15.0 / 192.0, 1e-9);
  EXPECT_LT(e.tensor.seconds, e.compute_s);
}

#include "weft/plan/sweep.h"

TEST(PlanSweep, RanksFittingLayoutsFastestFirst) {
  PlanInput in;
  in.model = preset("gpt3-175b");
  in.global_batch = 1536;
  in.achieved_flops = 140e12;
  in.layout.recompute = true;
  auto rows = sweep_layouts(in, 1024);
  ASSERT_FALSE(rows.empty());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].layout.gpus(), 1024);
    EXPECT_LE(rows[i].memory.total(), 80e9);
    if (i > 0) {
      EXPECT_LE(rows[i - 1].iteration.iteration_overlap_s, rows[i].iteration.iteration_overlap_s);
    }
  }
  // Without data parallelism sharding, one GPU cannot hold GPT-3: no layout of 1 GPU fits.
  EXPECT_TRUE(sweep_layouts(in, 1).empty());
  in.global_batch = 0;
  EXPECT_THROW(sweep_layouts(in, 1024), ConfigError);
}

// --- --emit-workload: one iteration as traces ---
#include <fstream>
#include <nlohmann/json.hpp>

#include "weft/algo/registry.h"
#include "weft/plan/report.h"
#include "weft/plan/workload.h"

TEST(EmitWorkload, OneIterationAsTracesWithTheEstimatesBytes) {
  PlanInput in;
  in.model = preset("gpt2-124m");
  in.layout.tp = 2;
  in.layout.pp = 2;
  in.layout.dp = 4;
  in.layout.micro_batches = 4;
  in.global_batch = 16;  // 4 micro-batches of 1 sequence per pipeline
  PlanReport r = make_plan(in);
  ASSERT_TRUE(r.iteration.has_value());
  std::string dir = ::testing::TempDir() + "/weft_emit";
  EmittedWorkload w = emit_workload(r, dir);
  EXPECT_EQ(w.ranks, 16);
  const double act = 1024.0 * 768 * 2;  // one micro-batch's hidden states, 16-bit
  for (int rank : {0, 2}) {  // first stage, second (last) stage
    std::ifstream f(dir + "/rank-" + std::to_string(rank) + ".jsonl");
    ASSERT_TRUE(f.good());
    std::string line;
    int records = 0, allreduces = 0, sends = 0, recvs = 0, dp = 0;
    double tp_bytes = 0, p2p_bytes = 0;
    std::int64_t last_end = 0;
    bool first = true;
    while (std::getline(f, line)) {
      auto j = nlohmann::json::parse(line);
      if (first) {  // the iteration's start, at 0 (the replay keeps the compute before the first operation)
        EXPECT_EQ(j["op"], "mark");
        EXPECT_EQ(j["start_us"].get<std::int64_t>(), 0);
        first = false;
        continue;
      }
      ++records;
      EXPECT_GE(j["start_us"].get<std::int64_t>(), last_end);
      last_end = j["end_us"].get<std::int64_t>();
      EXPECT_EQ(j["rank"].get<int>(), rank);
      double sent = 0;
      for (const auto& step : j["steps"])
        for (const auto& m : step) sent += m["bytes"].get<double>();
      std::string op = j["op"];
      if (op == "allreduce" && j["group_ranks"].size() == 2) {
        ++allreduces;
        tp_bytes += sent;
        // The recorded messages are those of the ring program.
        auto members = j["group_ranks"].get<std::vector<int>>();
        int index = members[0] == rank ? 0 : 1;
        auto p = weft::algo::build_program(weft::algo::Collective::kAllReduce, "ring", index, 2, j["count"].get<std::int64_t>());
        EXPECT_EQ(sent, weft::algo::stats(p).elements_sent * 2.0);
      } else if (op == "allreduce") {
        ++dp;
        EXPECT_EQ(j["group_ranks"], nlohmann::json({rank % 4, rank % 4 + 4, rank % 4 + 8, rank % 4 + 12}));
      } else if (op == "send") {
        ++sends;
        p2p_bytes += sent;
        EXPECT_EQ(j["peers"][0].get<int>(), rank == 0 ? 2 : 0);
      } else if (op == "recv") {
        ++recvs;
      }
    }
    // 6 layers per stage, 2 all-reduces each, forward and backward, 4 micro-batches.
    EXPECT_EQ(allreduces, 6 * 2 * 2 * 4);
    EXPECT_EQ(sends, 4);  // activations forward (stage 0) or gradients backward (stage 1)
    EXPECT_EQ(recvs, 4);
    EXPECT_EQ(dp, 1);
    EXPECT_EQ(records, allreduces + sends + recvs + dp);
    EXPECT_DOUBLE_EQ(tp_bytes, r.iteration->tensor.bytes);     // the planner's tensor traffic
    EXPECT_DOUBLE_EQ(p2p_bytes, 4 * act / 2);                   // half of the pipeline traffic: one direction
    EXPECT_DOUBLE_EQ(2 * p2p_bytes, r.iteration->pipeline.bytes);
  }
  PlanInput params_only = in;
  params_only.parameters = 7e9;
  EXPECT_THROW(emit_workload(make_plan(params_only), dir), weft::ConfigError);
  PlanInput no_batch = in;
  no_batch.global_batch = 0;
  EXPECT_THROW(emit_workload(make_plan(no_batch), dir), weft::ConfigError);
}
