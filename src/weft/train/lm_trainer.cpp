#include "weft/train/lm_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <nlohmann/json.hpp>

#include "weft/autograd/functions.h"
#include "weft/comm/communicator.h"
#include "weft/parallel/pipeline.h"
#include "weft/parallel/tensor_parallel.h"
#include "weft/parallel/zero.h"
#include "weft/data/text.h"
#include "weft/nn/recurrent.h"
#include "weft/nn/transformer.h"
#include "weft/optim/adam.h"
#include "weft/optim/sgd.h"
#include "weft/optim/schedule.h"
#include "weft/tensor/allocator.h"
#include "weft/tensor/thread_pool.h"
#include "weft/train/checkpoint.h"
#include "weft/train/safetensors.h"
#include "weft/train/trainer.h"
#include "weft/util/file.h"
#include "weft/util/progress.h"
#include "weft/util/units.h"

namespace weft {

namespace {
using Clock = std::chrono::steady_clock;

// B windows of context + 1 tokens starting at the given offsets: inputs and next-token targets.
void windows(const std::vector<std::int32_t>& tokens, const std::vector<std::int64_t>& starts, std::int64_t T,
             Tensor& ids, std::vector<std::int32_t>& targets) {
  const std::int64_t B = static_cast<std::int64_t>(starts.size());
  ids = Tensor::empty({B, T});
  float* p = ids.data<float>();
  targets.resize(static_cast<size_t>(B * T));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t) {
      p[b * T + t] = static_cast<float>(tokens[static_cast<size_t>(starts[static_cast<size_t>(b)] + t)]);
      targets[static_cast<size_t>(b * T + t)] = tokens[static_cast<size_t>(starts[static_cast<size_t>(b)] + t + 1)];
    }
}
}  // namespace

std::string LmSummary::to_json() const {
  nlohmann::json j{{"parameters", parameters},       {"vocab", vocab},
                        {"train_tokens", train_tokens},   {"val_tokens", val_tokens},
                        {"unigram_entropy", unigram_entropy}, {"train_loss", train_loss},
                        {"val_loss", val_loss},           {"tokens_per_second", tokens_per_second},
                        {"sample_words", sample_words},   {"sample_known_words", sample_known_words}};
  if (tp > 1) j["tensor_parallel"] = tp;
  if (resumed_from >= 0) j["resumed_from"] = resumed_from;
  if (zero > 0)
    j["zero_memory"] = {{"stage", zero}, {"parameters", zero_parameters}, {"gradients", zero_gradients},
                        {"optimizer", zero_optimizer}, {"step_parameters", zero_step_parameters}};
  if (!checkpoint.empty()) j["checkpoint"] = checkpoint;
  if (dp > 1) j["data_parallel"] = dp;
  j["peak_step_bytes"] = peak_step_bytes;
  j["precision"] = precision;
  j["rank_parameters"] = rank_parameters;
  j["rank_state_bytes"] = rank_state_bytes;
  if (pp > 1 || micro_batches > 1) {
    j["pipeline"] = {{"stages", pp}, {"micro_batches", micro_batches}, {"schedule", pipe_schedule},
                     {"bubble", bubble}, {"bubble_formula", bubble_formula}};
  }
  return j.dump();
}

namespace {
// Data parallelism: every gradient averaged over the replicas, in one flat all-reduce.
void average_gradients(const std::vector<std::pair<std::string, Var>>& params, comm::Communicator& group) {
  std::int64_t n = 0;
  for (const auto& [name, p] : params) n += p.value().numel();
  Tensor flat = Tensor::zeros({n});
  std::int64_t at = 0;
  for (const auto& [name, p] : params) {
    const std::int64_t k = p.value().numel();
    if (p.grad().defined()) {
      Tensor dst = flat.slice(0, at, at + k);
      dst.copy_(p.grad().contiguous().view({k}));
    }
    at += k;
  }
  group.allreduce(flat.data<float>(), n, comm::DataType::kF32, comm::ReduceOp::kAvg)->wait();
  at = 0;
  for (const auto& [name, p] : params) {
    const std::int64_t k = p.value().numel();
    Var q = p;
    q.set_grad(flat.slice(0, at, at + k).contiguous().view(p.shape()));
    at += k;
  }
}
}  // namespace

LmSummary train_lm(const LmConfig& c, std::FILE* out) {
  if (c.tokenizer != "char" && c.tokenizer != "word") throw ConfigError("unknown tokenizer '" + c.tokenizer + "' (known: char, word)");
  auto at_least = [](const char* flag, std::int64_t v, std::int64_t min) {
    if (v < min) throw ConfigError(fmt::format("{} must be at least {}, got {}", flag, min, v));
  };
  at_least("--context", c.context, 2);
  at_least("--batch", c.batch, 1);
  at_least("--max-steps", c.steps, 1);
  at_least("--eval-every", c.eval_every, 1);
  at_least("--eval-batches", c.eval_batches, 1);
  at_least("--layers", c.layers, 0);
  at_least("--d-model", c.dim, 1);
  at_least("--heads", c.heads, 1);
  at_least("--sample", c.sample, 0);
  at_least("--top-k", c.top_k, 0);
  at_least("--warmup", c.warmup, 0);
  at_least("--micro-batches", c.micro_batches, 1);
  at_least("--chunks", c.chunks, 1);
  const bool gpt = c.model == "gpt";
  if (!gpt && c.model != "lstm" && c.model != "lstm-seed" && c.model != "rnn" && c.model != "rnn-sigmoid") {
    throw ConfigError("unknown language model '" + c.model + "' (known: gpt, lstm, lstm-seed, rnn, rnn-sigmoid)");
  }
  if (gpt && c.dim % c.heads != 0) throw ConfigError(fmt::format("--d-model {} is not divisible by --heads {}", c.dim, c.heads));
  require_finite("--lr", c.lr);
  require_finite("--temperature", c.temperature);
  require_finite("--clip-grad", c.clip_grad);
  require_finite("--weight-decay", c.weight_decay);
  if (!(c.lr > 0)) throw ConfigError("--lr must be positive");
  if (!(c.temperature >= 0)) throw ConfigError("--temperature must be 0 (greedy) or positive");
  if (!(c.clip_grad >= 0)) throw ConfigError("--clip-grad must be 0 (none) or positive");
  if (!(c.weight_decay >= 0)) throw ConfigError("--weight-decay must not be negative");
  if ((c.resume || c.auto_resume) && c.checkpoint_dir.empty())
    throw ConfigError(std::string(c.resume ? "--resume" : "--auto-resume") + " needs --checkpoint-dir");
  if (c.checkpoint_every < 0) throw ConfigError("--checkpoint-every must not be negative");
  if (c.zero < 0 || c.zero > 3) throw ConfigError("--zero must be 0, 1, 2 or 3, got " + std::to_string(c.zero));
  if (c.zero > 0 && c.model != "gpt") throw ConfigError("--zero needs --model gpt among the language models");
  check_precision(c.precision);

  parse_positional(c.positional);
  if (c.threads > 0) set_num_threads(c.threads);
  Bf16Guard precision(c.precision == "bf16");
  const std::string text = load_corpus(c.data);
  std::unique_ptr<Tokenizer> tok;
  if (c.tokenizer == "char") tok = std::make_unique<CharTokenizer>(text); else tok = std::make_unique<WordTokenizer>(text);
  const std::vector<std::int32_t> all = tok->encode(text);
  const std::int64_t split = static_cast<std::int64_t>(all.size()) * 9 / 10;
  const std::vector<std::int32_t> train_tokens(all.begin(), all.begin() + split), val_tokens(all.begin() + split, all.end());
  if (static_cast<std::int64_t>(val_tokens.size()) <= c.context + 1) {
    throw DataError(c.data + ": too little text for a context of " + std::to_string(c.context) + " tokens");
  }
  LmSummary s;
  s.precision = c.precision;
  s.vocab = tok->vocab_size();
  s.train_tokens = static_cast<std::int64_t>(train_tokens.size());
  s.val_tokens = static_cast<std::int64_t>(val_tokens.size());
  s.unigram_entropy = unigram_entropy(train_tokens, s.vocab);

  Rng rng(c.seed);
  const std::int64_t layers = c.layers > 0 ? c.layers : (gpt ? 4 : 2);
  std::unique_ptr<LanguageModel> net;
  if (gpt) {
    net = std::make_unique<GPT>(
        GptConfig{s.vocab, c.context, c.dim, layers, c.heads, parse_positional(c.positional), !c.post_ln, c.recompute}, rng);
  } else {
    net = std::make_unique<RecurrentLM>(RecurrentConfig{s.vocab, c.context, c.dim, layers, c.model}, rng);
  }
  LanguageModel& model = *net;
  s.parameters = model.num_parameters();
  std::map<std::string, Shape> full_shapes;  // (the splits below free what a rank does not hold)
  for (const auto& [name, p] : model.named_parameters()) full_shapes[name] = p.shape();
  // A checkpoint holds the whole model: every rank loads it before the splits below cut it
  // (its optimizer state is loaded once the optimizer exists).
  const std::string model_tag = "lm-" + c.model;
  std::optional<Checkpoint> resume_ck;
  if (c.resume || c.auto_resume) {
    auto latest = latest_checkpoint(c.checkpoint_dir);
    if (!latest && c.resume) throw CheckpointError("--resume: no checkpoint in " + c.checkpoint_dir);
    if (latest) {
      resume_ck = load_checkpoint(*latest);
      if (resume_ck->meta.model != model_tag)
        throw CheckpointError(resume_ck->path + " holds model '" + resume_ck->meta.model + "', not '" + model_tag + "'");
      if (resume_ck->meta.optimizer != c.optimizer)
        throw CheckpointError(resume_ck->path + " was trained with optimizer '" + resume_ck->meta.optimizer + "', not '" +
                              c.optimizer + "'");
      model.load_state_dict(resume_ck->model);
    }
  }

  // Parallelism (gpt): a mesh of dp x pp x tp ranks under weft launch, tensor parallelism
  // innermost (neighbouring ranks: one host), then pipeline stages, then data-parallel
  // replicas. Micro-batches alone (pp 1) run the pipeline schedule in one process.
  const bool pipelined = c.pp > 1 || c.micro_batches > 1;
  if (c.tp < 1 || c.pp < 1 || c.dp < 1) throw ConfigError("--dp, --tp and --pp must be at least 1");
  if (c.tp_attention != "megatron" && c.tp_attention != "seed")
    throw ConfigError("unknown --tp-attention '" + c.tp_attention + "' (known: megatron, seed)");
  const int ranks = c.dp * c.tp * c.pp;
  std::unique_ptr<parallel::StageModel> stage;
  parallel::TensorParallelGpt* tpm = nullptr;
  std::unique_ptr<parallel::GptPipeline> pipe;
  std::shared_ptr<comm::Communicator> world, tp_group, pp_group, dp_group, mp_group;
  int rank = 0, replica = 0;
  std::FILE* log = out;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> devnull(nullptr, &std::fclose);
  if (ranks > 1 || pipelined) {
    if (!gpt) throw ConfigError("--dp, --pp, --tp and --micro-batches need --model gpt");
    const comm::ProcessInfo proc = comm::process_info_from_env();
    if (proc.world != ranks) {
      int dims = (c.dp > 1) + (c.tp > 1) + (c.pp > 1);
      std::string what = dims > 1 ? fmt::format("--dp {} x --tp {} x --pp {}", c.dp, c.tp, c.pp)
                         : c.tp > 1 ? fmt::format("--tp {}", c.tp)
                         : c.pp > 1 ? fmt::format("--pp {}", c.pp)
                                    : fmt::format("--dp {}", c.dp);
      throw ConfigError(fmt::format("{} needs {} ranks: start it with weft launch --nproc-per-node {} (the job has {})",
                                    what, ranks, ranks, proc.world));
    }
    if (c.batch % c.dp != 0)
      throw ConfigError(fmt::format("--batch {} is not divisible by --dp {}", c.batch, c.dp));
    rank = proc.rank;
    s.rank = rank;
    if (ranks > 1) {
      world = comm::Communicator::init(proc, comm::CommOptions::from_env());
      const int t = rank % c.tp, p = rank / c.tp % c.pp, d = rank / (c.tp * c.pp);
      replica = d;
      auto group_of = [&](int count, const std::function<int(int)>& member) -> std::shared_ptr<comm::Communicator> {
        if (count == 1) return nullptr;
        if (count == ranks) return world;
        std::vector<int> members;
        for (int i = 0; i < count; ++i) members.push_back(member(i));
        return world->new_group(members);
      };
      tp_group = group_of(c.tp, [&](int i) { return (d * c.pp + p) * c.tp + i; });
      pp_group = group_of(c.pp, [&](int i) { return (d * c.pp + i) * c.tp + t; });
      dp_group = group_of(c.dp, [&](int i) { return (i * c.pp + p) * c.tp + t; });
      // The ranks holding one copy of the model, for the gradient norm.
      mp_group = c.tp > 1 && c.pp > 1 ? group_of(c.tp * c.pp, [&](int i) { return d * c.pp * c.tp + i; })
                 : c.tp > 1           ? tp_group
                                      : pp_group;
    }
    if (rank != 0) {
      devnull.reset(std::fopen("/dev/null", "w"));
      log = devnull.get();
    }
  }
  if (c.tp > 1) {
    auto t = std::make_unique<parallel::TensorParallelGpt>(static_cast<GPT&>(model), tp_group, c.tp_attention == "seed");
    tpm = t.get();
    stage = std::move(t);
    s.tp = c.tp;
  } else if (gpt) {
    stage = std::make_unique<parallel::LocalGpt>(static_cast<GPT&>(model));
  }
  s.dp = c.dp;
  if (pipelined) {
    if (c.micro_batches < 1) throw ConfigError("--micro-batches must be at least 1");
    const algo::PipeSchedule schedule = algo::parse_pipe_schedule(c.pipe_schedule);
    pipe = std::make_unique<parallel::GptPipeline>(*stage, pp_group,
                                                   parallel::PipelineOptions{c.micro_batches, schedule, c.chunks, c.balance});
    s.pp = c.pp;
    s.micro_batches = c.micro_batches;
    s.pipe_schedule = algo::pipe_schedule_name(schedule);
    s.bubble_formula = static_cast<double>(c.pp - 1) / static_cast<double>(c.micro_batches + c.pp - 1);
  }
  const auto trained = pipe ? pipe->own_parameters() : stage ? stage->parameters() : model.named_parameters();
  // The gradient norm over one model copy: a tied duplicate counts once, a replicated slice 1/tp.
  const parallel::NormWeight norm_weight =
      stage ? parallel::norm_weight(*stage, pipe ? pipe->counted_elsewhere() : "") : parallel::NormWeight{};
  auto make_optimizer = [&](std::vector<std::pair<std::string, Var>> params) -> std::unique_ptr<Optimizer> {
    if (c.optimizer == "adamw") return std::make_unique<Adam>(params, c.lr, AdamOptions{0.9, 0.95, 1e-8, c.weight_decay, true});
    if (c.optimizer == "sgd") return std::make_unique<SGD>(params, c.lr, c.momentum, c.weight_decay);
    throw ConfigError("unknown optimizer '" + c.optimizer + "' for language models (known: adamw, sgd)");
  };
  // ZeRO over the data-parallel ranks: each holds 1/dp of the optimizer state (and gradients,
  // parameters); otherwise one optimizer over the parameters this rank trains.
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<parallel::ZeroRedundancyOptimizer> zero;
  GPT* gpt_model = dynamic_cast<GPT*>(&model);
  if (c.zero > 0) {
    // Stage 3 gathers a GPT's parameters block by block, around each block's forward and backward.
    // (Pipeline stages and tensor-parallel slices gather their parameters once per step.)
    std::vector<std::string> prefixes;
    for (std::int64_t i = 0; c.zero == 3 && gpt_model && !pipe && !tpm && i < layers; ++i)
      prefixes.push_back("h" + std::to_string(i) + ".");
    // Under pipeline or tensor parallelism ZeRO shards each stage's or slice's parameters
    // over its data-parallel group.
    zero = std::make_unique<parallel::ZeroRedundancyOptimizer>(trained, dp_group, c.zero, make_optimizer, prefixes);
    if (!prefixes.empty()) {
      gpt_model->set_block_hook([z = zero.get()](std::int64_t block, bool after) {
        if (after) z->after_layer(static_cast<std::size_t>(block));
        else z->before_layer(static_cast<std::size_t>(block));
      });
    }
    s.zero = c.zero;
  } else {
    optimizer = make_optimizer(trained);
  }
  Optimizer& opt = zero ? zero->optimizer() : *optimizer;
  for (const auto& [name, p] : trained) s.rank_parameters += p.value().numel();
  if (zero && c.zero == 3) s.rank_parameters = zero->shard_elements();  // the rest is gathered per step
  std::int64_t first_step = 0;
  if (resume_ck) {
    const Checkpoint& ck = *resume_ck;
    if (zero) {
      // This rank's shard of the consolidated state (of its stage's parameters, cut to its
      // tensor-parallel slice).
      std::set<std::string> mine_names;
      for (const auto& [name, p] : trained) mine_names.insert(name);
      StateDict mine;
      for (const auto& [key, t] : ck.optimizer) {
        const std::string name = key.substr(key.find('.') + 1);
        if (mine_names.count(name)) mine.emplace_back(key, tpm && tpm->is_shard(name) ? tpm->part_of(name, t) : t);
      }
      zero->load_state(mine);
    } else if (tpm || pipe) {
      // The buffers of this rank's parameters, cut like them.
      std::map<std::string, const Tensor*> by_key;
      for (const auto& [key, t] : ck.optimizer) by_key[key] = &t;
      StateDict mine;
      for (const auto& [key, t] : opt.state()) {
        auto it = by_key.find(key);
        if (it == by_key.end()) throw CheckpointError(ck.path + ": optimizer state has no entry '" + key + "'");
        const std::string name = key.substr(key.find('.') + 1);
        mine.emplace_back(key, tpm && tpm->is_shard(name) ? tpm->part_of(name, *it->second) : *it->second);
      }
      opt.load_state(mine);
    } else {
      opt.load_state(ck.optimizer);
    }
    opt.set_steps(ck.meta.optimizer_steps);
    for (const auto& [name, st] : ck.meta.rngs)
      if (name == "sampler") rng.set_state(st);
    first_step = ck.meta.step;
    s.resumed_from = first_step;
    fmt::print(log, "resumed from {} (step {}, written by {} rank(s))\n", ck.path, first_step,
               ck.meta.info.count("ranks") ? ck.meta.info.at("ranks") : "?");
  }
  // The whole model and its optimizer state in one piece on rank 0: every stage's slices
  // all-gathered within its tensor-parallel group, then sent to stage 0.
  auto consolidate = [&](StateDict& model_sd, StateDict& opt_sd, const StateDict* zero_state) {
    std::map<std::string, Tensor> buffers;
    std::vector<std::string> prefixes;
    for (const auto& [key, t] : zero_state ? *zero_state : opt.state()) {  // ZeRO: already per parameter
      buffers[key] = t;
      std::string prefix = key.substr(0, key.find('.'));
      if (std::find(prefixes.begin(), prefixes.end(), prefix) == prefixes.end()) prefixes.push_back(prefix);
    }
    std::map<std::string, Var> held;
    for (const auto& [name, p] : stage->parameters()) held[name] = p;
    for (const auto& [name, p] : model.named_parameters()) {
      const int owner = pipe ? pipe->owner_of(name) : 0;
      const bool here = !pipe || pipe->stage() == owner;
      const bool sliced = tpm && tpm->is_shard(name);
      std::vector<Tensor> pieces;  // the value, then each optimizer buffer
      if (here) {
        pieces.push_back(sliced ? tpm->full_of(name, held.at(name).value()) : held.at(name).value().contiguous());
        for (const std::string& prefix : prefixes) {
          const Tensor& b = buffers.at(prefix + "." + name);
          pieces.push_back(sliced ? tpm->full_of(name, b) : b.contiguous());
        }
      }
      if (pipe && owner != 0) {
        if (pipe->stage() == owner) {
          for (Tensor& t : pieces) pp_group->send(t.data<float>(), t.numel(), comm::DataType::kF32, 0);
        } else if (pipe->stage() == 0) {
          for (std::size_t k = 0; k < prefixes.size() + 1; ++k) {
            pieces.push_back(Tensor::zeros(full_shapes.at(name)));
            pp_group->recv(pieces.back().data<float>(), pieces.back().numel(), comm::DataType::kF32, owner);
          }
        }
      }
      if (rank == 0) {
        model_sd.emplace_back(name, pieces[0]);
        for (std::size_t k = 0; k < prefixes.size(); ++k) opt_sd.emplace_back(prefixes[k] + "." + name, pieces[k + 1]);
      }
    }
  };
  auto save = [&](std::int64_t step_done) {
    if (c.checkpoint_dir.empty()) return;
    parallel::ZeroCheckpointScope zero_scope(zero.get());  // every rank takes part
    const auto& zero_state = zero_scope.state;
    StateDict model_sd, opt_sd;
    if (tpm || pipe) consolidate(model_sd, opt_sd, zero ? &zero_state.consolidated : nullptr);
    if (rank != 0) return;
    if (!tpm && !pipe) {
      model_sd = model.state_dict();
      opt_sd = zero ? zero_state.consolidated : opt.state();
    }
    CheckpointMeta meta;
    meta.model = model_tag;
    meta.step = step_done;
    meta.optimizer = c.optimizer;
    meta.optimizer_steps = opt.steps();
    meta.rngs.emplace_back("sampler", rng.state());
    meta.info = {{"data", c.data}, {"tokenizer", c.tokenizer}, {"ranks", std::to_string(ranks)},
                 {"layout", fmt::format("dp {} x pp {} x tp {}", c.dp, c.pp, c.tp)}};
    s.checkpoint = save_checkpoint(c.checkpoint_dir, meta, model_sd, opt_sd, c.keep_checkpoints, zero_state.per_rank);
  };
  Schedule sched;
  sched.kind = "cosine";
  sched.warmup_steps = std::min(c.warmup, c.steps);
  sched.total_steps = c.steps;
  sched.min_lr = c.lr / 10;
  fmt::print(log, "{}: {} parameters; {} tokenizer, vocabulary {}; {} training and {} validation tokens; "
                  "unigram entropy {:.3f} nats/token\n",
             model.describe(), s.parameters, c.tokenizer, s.vocab, s.train_tokens, s.val_tokens, s.unigram_entropy);
  if (pipe) {
    std::string parts;
    const auto& b = pipe->boundaries();
    for (std::size_t v = 0; v + 1 < b.size(); ++v)
      parts += fmt::format("{}{}-{}", v ? " | " : "", b[v], b[v + 1] - 1);
    fmt::print(log, "pipeline: {} stages, {} micro-batches of {} sequences, schedule {}{}; blocks per {}stage: {} "
                    "(balanced by {})\n",
               c.pp, c.micro_batches, c.batch / c.micro_batches, s.pipe_schedule,
               s.pipe_schedule == "interleaved" ? fmt::format(" ({} chunks per stage)", c.chunks) : "",
               s.pipe_schedule == "interleaved" ? "virtual " : "", parts, c.balance);
  }

  // Fixed validation windows, spread evenly.
  std::vector<std::int64_t> val_starts;
  const std::int64_t span = static_cast<std::int64_t>(val_tokens.size()) - c.context - 1;
  for (std::int64_t i = 0; i < c.eval_batches * c.batch; ++i) val_starts.push_back(span * i / (c.eval_batches * c.batch));
  auto validate = [&] {
    NoGradGuard no_grad;
    model.eval();
    double total = 0;
    for (std::int64_t b = 0; b < c.eval_batches; ++b) {
      std::vector<std::int64_t> starts(val_starts.begin() + b * c.batch, val_starts.begin() + (b + 1) * c.batch);
      Tensor ids;
      std::vector<std::int32_t> targets;
      windows(val_tokens, starts, c.context, ids, targets);
      if (zero) zero->gather();
      if (pipe) total += pipe->eval_batch(ids, targets);
      else if (tpm) total += tpm->loss(ids, targets).item();
      else total += cross_entropy(reshape(model.forward(Var(ids)), {c.batch * c.context, s.vocab}), targets).item();
    }
    model.train();
    if (zero) zero->release();
    return total / static_cast<double>(c.eval_batches);
  };

  s.rank_state_bytes = static_cast<std::int64_t>(allocator_live_bytes());
  Progress progress("step", c.steps);
  // The train loss reported is the mean over the steps since the last validation.
  double train_seconds = 0, window_sum = 0, running = 0, bubble_sum = 0;
  std::int64_t bubble_steps = 0;
  std::int64_t window_steps = 0;
  const auto start = Clock::now();
  for (std::int64_t step = first_step; step < c.steps; ++step) {
    std::vector<std::int64_t> starts(static_cast<size_t>(c.batch));
    for (auto& st : starts) st = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(s.train_tokens - c.context - 1)));
    Tensor ids;
    std::vector<std::int32_t> targets;
    windows(train_tokens, starts, c.context, ids, targets);
    const auto t0 = Clock::now();
    opt.set_lr(learning_rate(sched, c.lr, step));
    opt.zero_grad();
    const std::size_t live_before = allocator_live_bytes();
    allocator_reset_peak();
    double l;
    // This data-parallel replica's share of the batch.
    if (c.dp > 1) {
      const std::int64_t per = c.batch / c.dp;
      ids = ids.slice(0, replica * per, (replica + 1) * per).contiguous();
      targets = std::vector<std::int32_t>(targets.begin() + replica * per * c.context,
                                          targets.begin() + (replica + 1) * per * c.context);
    }
    // After backward: average over the replicas, clip by the whole model's norm, update.
    auto update = [&](bool zero_after) {
      if (zero) {  // reduce (or reduce-scatter) the gradients, clip over the shards, update, re-gather
        zero->finish();
        if (c.clip_grad > 0) zero->clip_grad_norm(c.clip_grad, norm_weight, mp_group.get());
        zero->step();
        if (zero_after) zero->gather();  // seed's schedule: the next micro-batch computes
        return;
      }
      if (dp_group) average_gradients(trained, *dp_group);
      if (c.clip_grad > 0) {
        if (stage) parallel::clip_grad_norm(trained, norm_weight, mp_group.get(), c.clip_grad);
        else clip_grad_norm(model.parameters(), c.clip_grad);
      }
      opt.step();
      if (zero_after) opt.zero_grad();
    };
    if (zero) zero->gather();
    if (pipe) {
      const bool per_micro_batch = s.pipe_schedule == "seed";
      l = pipe->train_batch(ids, targets, [&] { update(per_micro_batch); });
      if (step > 0) {
        bubble_sum += pipe->last_bubble();
        ++bubble_steps;
      }
    } else {
      Var loss = stage ? stage->head_loss(stage->run_blocks(stage->embed(ids), 0, layers), targets)
                       : cross_entropy(reshape(model.forward(Var(ids)), {ids.size(0) * c.context, s.vocab}), targets);
      loss.backward();
      update(false);
      l = loss.item();
    }
    if (dp_group) dp_group->allreduce(&l, 1, comm::DataType::kF64, comm::ReduceOp::kAvg)->wait();
    // What the step added on top of what lived before it: activations, gradients, buffers.
    s.peak_step_bytes = std::max<std::int64_t>(s.peak_step_bytes,
                                               static_cast<std::int64_t>(allocator_peak_bytes() - live_before));
    train_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    if (!std::isfinite(l)) throw Error(fmt::format("loss became {} at step {}: lower the learning rate", l, step + 1));
    window_sum += l;
    running = window_sum / static_cast<double>(++window_steps);
    if (!c.quiet && rank == 0) {
      double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      progress.update(step + 1, elapsed / static_cast<double>(step + 1) * static_cast<double>(c.steps - step - 1),
                      fmt::format("loss {:.3f}  {:.0f} tokens/s", running, (step + 1) * c.batch * c.context / train_seconds));
    }
    if ((c.checkpoint_every > 0 && (step + 1) % c.checkpoint_every == 0) || step + 1 == c.steps) save(step + 1);
    if ((step + 1) % c.eval_every == 0 || step + 1 == c.steps) {
      progress.finish();
      s.val_loss = validate();
      fmt::print(log, "step {}: train loss {:.3f}, validation loss {:.3f} (unigram entropy {:.3f})\n", step + 1, running,
                 s.val_loss, s.unigram_entropy);
      std::fflush(log);
      s.train_loss = running;
      window_sum = 0;
      window_steps = 0;
    }
  }
  s.tokens_per_second = static_cast<double>((c.steps - first_step) * c.batch * c.context) / std::max(train_seconds, 1e-9);
  if (pipe) {
    s.bubble = bubble_steps ? bubble_sum / static_cast<double>(bubble_steps) : pipe->last_bubble();
    fmt::print(log, "pipeline bubble: {:.1f}% measured (mean over stages and steps), (S-1)/(M+S-1) = {:.1f}%\n",
               100 * s.bubble, 100 * s.bubble_formula);
  }
  // Rank 0 samples and saves the whole model: first the tensor-parallel shards into every
  // stage's model, then the stages into stage 0's.
  if (zero) {
    if (gpt_model) gpt_model->set_block_hook(nullptr);  // rank 0 samples alone: no more collectives
    const auto m = zero->memory();
    zero->gather_all();  // stage 3: the whole model for sampling and saving
    s.zero_parameters = m.parameters;
    s.zero_gradients = m.gradients;
    s.zero_optimizer = m.optimizer;
    s.zero_step_parameters = m.peak_parameters;
    fmt::print(log, "ZeRO stage {} on {} rank(s), rank 0 holds between steps: parameters {}, gradients {}, optimizer state {}; "
               "parameters during a step: {}\n", c.zero, c.dp, human_bytes(m.parameters), human_bytes(m.gradients),
               human_bytes(m.optimizer), human_bytes(m.peak_parameters));
  }
  if (tpm) {
    if (pipe) tpm->gather_parameters([&](const std::string& name) { return pipe->owner_of(name) == pipe->stage() ||
                                                                          (name == "wte.weight" && pipe->stage() == c.pp - 1); });
    else tpm->gather_parameters();
  }
  if (pipe) pipe->gather_parameters(model.named_parameters(), full_shapes);
  if (c.sample > 0 && rank == 0) {
    std::vector<std::int32_t> prompt = tok->encode(c.prompt);
    auto ids = model.generate(prompt, c.sample, c.temperature, c.top_k, rng);
    s.sample = tok->decode(std::vector<std::int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(prompt.size()), ids.end()));
    // How many of the generated words (three letters or more) occur in the corpus.
    std::set<std::string> known;
    for (const std::string& w : WordTokenizer::split(text)) known.insert(w);
    std::int64_t words = 0, hits = 0;
    for (const std::string& w : WordTokenizer::split(s.sample)) {
      if (w.size() < 3 || !std::isalpha(static_cast<unsigned char>(w[0]))) continue;
      ++words;
      hits += known.count(w) ? 1 : 0;
    }
    s.sample_words = words;
    s.sample_known_words = words ? static_cast<double>(hits) / static_cast<double>(words) : 0.0;
    fmt::print(log, "sample (temperature {}):\n{}{}\n", c.temperature, c.prompt, s.sample);
    fmt::print(log, "{} of the {} generated words of three letters or more occur in the corpus ({:.0f}%)\n", hits, words,
               100 * s.sample_known_words);
  }
  if (!c.save_model.empty() && rank == 0) write_file_atomic(c.save_model, encode_safetensors(model.state_dict()));
  return s;
}

}  // namespace weft
