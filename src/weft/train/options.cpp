#include "weft/train/options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "weft/io/hf_import.h"
#include "weft/nn/model_recipe.h"
#include "weft/nn/models.h"
#include "weft/nn/transformer.h"
#include "weft/train/train_flags.h"
#include "weft/util/checked.h"
#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/parse.h"
#include "weft/util/size.h"

namespace weft {

namespace {
void at_least(const char* flag, std::int64_t value, std::int64_t min) {
  if (value < min) throw ConfigError(fmt::format("{} must be at least {}, got {}", flag, min, value));
}
// The mesh against the GPT's shape, in the flags' words (the pipeline and tensor-parallel
// classes say the same in their own).
void check_gpt_layout(const TrainOptions& o) {
  if (!is_transformer_model(o.model)) return;
  const parallel::ParallelOptions& p = o.parallel;
  if (p.mesh.tp > 1 && o.heads % p.mesh.tp != 0)
    throw ConfigError(fmt::format("--tp {} does not divide the {} attention heads", p.mesh.tp, o.heads));
  if (p.mesh.tp > 1 && o.kv_heads > 0 && o.kv_heads % p.mesh.tp != 0)
    throw ConfigError(fmt::format("--tp {} does not divide the {} key-value heads (--kv-heads)", p.mesh.tp, o.kv_heads));
  if (p.mesh.tp > 1 && p.tp_attention == "seed" && ((o.kv_heads > 0 && o.kv_heads != o.heads) || o.window > 0))
    throw ConfigError("--tp-attention seed gathers every head's Q and K: it needs --kv-heads equal to --heads and no --window");
  if (!p.pipelined()) return;
  const bool interleaved = p.pipeline.schedule == algo::PipeSchedule::kInterleaved;
  if (interleaved && p.pipeline.chunks < 2)
    throw ConfigError("--pipeline-schedule interleaved needs --chunks 2 or more");
  const int chunks = interleaved ? p.pipeline.chunks : 1;
  const std::int64_t layers = model_layers(o), stages = std::int64_t{p.mesh.pp} * chunks;
  if (layers < stages) {
    throw ConfigError(fmt::format("--pp {}{} needs at least {} layers; the model has {}", p.mesh.pp,
                                  chunks > 1 ? fmt::format(" x --chunks {}", chunks) : "", stages, layers));
  }
  const std::int64_t dp = p.mesh.dp > 0 ? p.mesh.dp : 1;
  // The even split (data/deal.h) gives replicas lo or hi sequences.
  const std::int64_t lo = *o.batch / dp, hi = (*o.batch + dp - 1) / dp, m = p.pipeline.micro_batches;
  if (lo % m != 0 || hi % m != 0) {
    throw ConfigError(dp == 1 ? fmt::format("--batch {} is not divisible by --micro-batches {}", *o.batch, m)
                              : fmt::format("--batch {} on --dp {} is {} sequences per replica, not divisible by "
                                            "--micro-batches {}", *o.batch, dp, lo % m != 0 ? lo : hi, m));
  }
}

}  // namespace

bool is_language_model(const std::string& model) {
  return is_transformer_model(model) || model == "lstm" || model == "lstm-seed" || model == "rnn" || model == "rnn-sigmoid";
}

TrainOptions with_task_defaults(TrainOptions o) {
  if (!is_language_model(o.model)) {
    const auto& images = model_names();
    if (std::find(images.begin(), images.end(), o.model) == images.end()) {
      std::string known;
      for (const auto& n : images) known += n + ", ";
      throw ConfigError("unknown model '" + o.model + "' (known: " + known + "gpt, llama, lstm, rnn)");
    }
  }
  if (o.model == "lstm" && o.lstm_variant != "standard") {
    if (o.lstm_variant != "seed")
      throw ConfigError("unknown --lstm-variant '" + o.lstm_variant + "' (known: standard, seed)");
    o.model = "lstm-seed";
  }
  if (o.model == "rnn" && o.rnn_activation != "tanh") {
    if (o.rnn_activation != "sigmoid")
      throw ConfigError("unknown --rnn-activation '" + o.rnn_activation + "' (known: tanh, sigmoid)");
    o.model = "rnn-sigmoid";
  }
  o.parallel.pipeline.schedule = algo::parse_pipe_schedule(o.pipeline_schedule);
  const bool text = is_language_model(o.model);
  if (!o.init_from.empty() && is_transformer_model(o.model)) {
    // The model's own sizes (config.json; the parameters are read when the model is built).
    if (!is_hf_import(o.init_from))
      throw ConfigError("--init-from " + o.init_from + ": not a model folder in the Hugging Face layout (config.json "
                        "and model.safetensors)");
    const GptConfig g = hf_folder_config(o.init_from);
    if (hf_model_name(g) != o.model)
      throw ConfigError("--init-from " + o.init_from + " holds a " + (g.positional == Positional::kRotary ? "Llama-family" : "GPT-2") +
                        " model: use --model " + hf_model_name(g));
    o.layers = g.layers;
    o.dim = g.dim;
    o.heads = g.heads;
    o.positional = positional_name(g.positional);
    o.post_ln = false;
    if (!o.lr) o.lr = 1e-4;  // fine-tuning: far below training from scratch
  }
  if (!o.data) o.data = text ? "fortunes" : "fashion-mnist";
  if (!o.max_steps) o.max_steps = text ? 1000 : 0;
  if (!text && !o.epochs) o.epochs = 1;
  if (!o.eval_every) o.eval_every = text ? 200 : 0;
  if (!o.batch) o.batch = text ? 16 : 64;
  if (!o.lr) o.lr = text ? 3e-3 : 0.01;
  if (!o.optimizer) o.optimizer = text ? "adamw" : "sgd";
  if (!o.weight_decay) o.weight_decay = text ? 0.1 : 0.0;
  if (!o.lr_schedule_kind) o.lr_schedule_kind = text ? "cosine" : "constant";
  if (!o.warmup) o.warmup = text ? 100 : 0;
  if (!o.min_lr) o.min_lr = text ? *o.lr / 10 : 0.0;
  if (!o.clip_grad) o.clip_grad = text ? 1.0 : 0.0;
  return o;
}

namespace {
// "2:1:1": positive numbers, or ConfigError naming `flag` and what else it takes.
std::vector<double> parse_shares(const std::string& text, const std::string& flag, const std::string& words) {
  const auto shares = parse_number_list(text, ':');
  if (!shares || std::any_of(shares->begin(), shares->end(), [](double v) { return v <= 0; }))
    throw ConfigError(flag + " '" + text + "' is not " + words + " or positive numbers such as 2:1");
  return *shares;
}
}  // namespace

std::vector<double> parse_stage_shares(const std::string& text) {
  if (text == "even" || text == "measured") return {};
  return parse_shares(text, "--stage-shares", "even, measured");
}

std::vector<double> parse_dp_shares(const std::string& text) {
  if (text == "even" || text == "measured") return {};
  return parse_shares(text, "--dp-shares", "even, measured");
}

std::vector<RankTarget> parse_grow_at(const std::string& text) {
  std::vector<RankTarget> targets;
  if (text.empty() || text == "noise") return targets;
  const auto bad = [&] {
    return ConfigError("--grow-at '" + text + "' is not noise or STEP:RANKS,... (steps increasing, 1 to 65536 ranks)");
  };
  const auto items = split_list(text, ',', 1024);
  if (!items) throw bad();
  for (std::string_view item : *items) {
    const auto target = parse_integer_pair(item);
    if (!target) throw bad();
    const auto [step, world] = *target;
    if (step < 0 || world < 1 || world > 65536 || (!targets.empty() && step <= targets.back().step)) throw bad();
    targets.push_back({step, static_cast<int>(world)});
  }
  return targets;
}

std::optional<FreezeRule> parse_freeze_converged(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const auto parts = split_pair(text);
  const auto ratio = parse_number(parts ? parts->first : std::string_view(text));
  const auto steps = parts ? parse_integer(parts->second) : std::optional<std::int64_t>(20);
  if (!ratio || !(*ratio > 0 && *ratio < 1e6) || !steps || *steps < 1 || *steps > 1000000)
    throw ConfigError("--freeze-converged '" + text + "' is not RATIO[:STEPS] (a positive ratio, 1 to 1000000 steps)");
  return FreezeRule{*ratio, *steps};
}

namespace {

// How long, how fast, with what: the run's sizes, the optimizer, threads and precision.
void validate_run(const TrainOptions& o, bool text) {
  // (Each flag's own bounds and choices: train_flags.cpp, checked by validate.)
  if (text) at_least("--max-steps", *o.max_steps, 1);
  if (text) at_least("--eval-every", *o.eval_every, 1);
  if (text && *o.optimizer == "adam")
    throw ConfigError("unknown optimizer 'adam' for language models (known: adamw, sgd)");
}

// What adapts while the run goes: shares, growth, freezing, offloading, merged stages.
void validate_adaptive(const TrainOptions& o) {
  parse_dp_shares(o.dp_shares);
  if ((!parse_stage_shares(o.stage_shares).empty() || o.stage_shares == "measured") && o.parallel.mesh.pp < 2)
    throw ConfigError("--stage-shares gives a pipeline's stages their shares: it needs --pp 2 or more");
  parse_grow_at(o.grow_at);
  parse_freeze_converged(o.freeze_converged);
  if (!o.hidden.empty()) parse_hidden(o.hidden);
  if (o.offload == "params") {
    if (is_language_model(o.model) && !is_transformer_model(o.model))
      throw ConfigError("--offload params streams the image models' layers or a GPT's blocks, not a recurrent model's");
    if (o.parallel.strategy != "ddp" || o.parallel.zero > 0 || o.parallel.model_parallel())
      throw ConfigError("--offload params streams the layers of one replica: DDP or one process (not ZeRO, the "
                        "parameter server, federated averaging or model parallelism)");
    if (*o.clip_grad > 0)
      throw ConfigError("--offload params updates each layer as soon as its gradient is ready: --clip-grad 0 (a norm "
                        "over the whole model would need every gradient first)");
    if (o.freeze_below > 0 || !o.freeze_converged.empty() || !o.grow_at.empty() || o.parallel.ddp.grad_dtype != "fp32")
      throw ConfigError("--offload params goes without freezing, --grow-at and --grad-dtype other than fp32");
  }
  if (!o.memory_limit.empty()) parse_size(o.memory_limit, "--memory-limit");
  if (!o.offload_dir.empty() && !is_directory(o.offload_dir))
    throw ConfigError("--offload-dir " + o.offload_dir + " is not a folder");
  const bool freezes = o.freeze_below > 0 || !o.freeze_converged.empty();
  if (freezes && (o.parallel.strategy != "ddp" || o.parallel.zero > 0 || o.parallel.mesh.tp > 1))
    throw ConfigError("--freeze-below and --freeze-converged work with DDP, pipelines or one process (not ZeRO, the "
                      "parameter server, federated averaging or tensor parallelism)");
  if (!o.merge_frozen_stages.empty()) {
    if (o.parallel.mesh.pp < 2 || !freezes)
      throw ConfigError("--merge-frozen-stages merges the stages of a pipeline (--pp 2 or more) whose blocks froze "
                        "(--freeze-below or --freeze-converged)");
    if (o.parallel.pipeline.schedule == algo::PipeSchedule::kInterleaved)
      throw ConfigError("--merge-frozen-stages: the interleaved schedule's stages hold blocks from all over the model");
  }
  if (o.dp_shares != "even" && o.parallel.strategy == "fedavg")
    throw ConfigError("--dp-shares: federated clients each train on their own data (leave it even)");
  if (o.dp_shares == "measured" && o.parallel.model_parallel())
    throw ConfigError("--dp-shares measured needs a data-parallel job (no --tp or --pp); give the shares instead");
}

// The job: resuming, federated clients, the layout.
void validate_job(const TrainOptions& o) {
  if ((o.resume || o.auto_resume) && o.checkpoint_dir.empty())
    throw ConfigError(std::string(o.resume ? "--resume" : "--auto-resume") + " needs --checkpoint-dir");
  if (!(o.non_iid > 0)) throw ConfigError("--non-iid must be positive (or inf for IID data)");
  parallel::validate(o.parallel);
  if (o.parallel.strategy == "ps" && o.parallel.staleness >= 0 && (!o.checkpoint_dir.empty() || o.resume || o.auto_resume))
    throw ConfigError("checkpoints are not supported with the asynchronous parameter server (--staleness) yet");
  if (!o.model_config.empty() && is_transformer_model(o.model)) {  // (other models: train_flags.h)
    const GptConfig g = hf_config_file(o.model_config);
    if (hf_model_name(g) != o.model)
      throw ConfigError("--model-config " + o.model_config + " describes a " +
                        (g.positional == Positional::kRotary ? "Llama-family" : "GPT-2") + " model: use --model " +
                        hf_model_name(g));
  }
}

// A transformer's shape: the heads against the width and the key-value heads, the MLP's
// width, rotary embeddings, the window (each bounded so that no product of them overflows).
void validate_transformer(const TrainOptions& o) {
  if (o.dim % o.heads != 0) throw ConfigError(fmt::format("--d-model {} is not divisible by --heads {}", o.dim, o.heads));
  bounded(o.kv_heads, 0, o.heads, "--kv-heads");
  if (o.kv_heads > 0 && o.heads % o.kv_heads != 0)
    throw ConfigError(fmt::format("--heads {} is not a multiple of --kv-heads {}", o.heads, o.kv_heads));
  const Positional positional = parse_positional(o.positional.value_or(o.model == "llama" ? "rotary" : "learned"));
  if (o.rope_theta) {
    if (positional != Positional::kRotary) throw ConfigError("--rope-theta needs rotary positions (--positional rotary)");
  }
  if (positional == Positional::kRotary && (o.dim / o.heads) % 2 != 0)
    throw ConfigError(fmt::format("rotary positions need an even head size: --d-model {} over --heads {} is {}", o.dim,
                                  o.heads, o.dim / o.heads));
}

// A language model's tokenizer, sizes and sampling, and what it does not take.
void validate_language_model(const TrainOptions& o) {
  const bool model_file = o.tokenizer.size() > 6 && o.tokenizer.compare(o.tokenizer.size() - 6, 6, ".model") == 0;
  if (o.tokenizer != "char" && o.tokenizer != "word" && o.tokenizer != "bpe" && !model_file)
    throw ConfigError("unknown tokenizer '" + o.tokenizer + "' (known: char, word, bpe, or a SentencePiece FILE.model)");
  // (Model sizes are bounded far above what trains on a CPU, so that no product of them
  // overflows and a typo cannot ask for the machine's memory layer by layer: train_flags.cpp.)
  checked_mul(o.eval_batches, *o.batch, "--eval-batches x --batch (validation windows)");
  if (is_transformer_model(o.model)) validate_transformer(o);  // (a transformer's flags elsewhere: train_flags.h)
  if (!is_transformer_model(o.model) && (o.parallel.model_parallel() || o.parallel.mesh.dp > 1))
    throw ConfigError("--dp, --pp, --tp and --micro-batches need --model gpt or llama");
  if (!is_transformer_model(o.model) && o.parallel.zero > 0)
    throw ConfigError("--zero needs --model gpt or llama among the language models");
  check_gpt_layout(o);
  if (o.parallel.strategy != "ddp")
    throw ConfigError("--strategy " + o.parallel.strategy + " is not supported with --model " + o.model + " yet");
}

// The learning-rate schedule's settings.
void validate_schedule(const TrainOptions& o) {
  const Schedule schedule = lr_schedule(o, 1);
  if (schedule.kind == "step" && !o.step_size)
    throw ConfigError("--lr-schedule step needs --step-size: the steps between decays by --gamma");
  validate(schedule);
}

}  // namespace

void validate(const TrainOptions& o) {
  check_values(train_flags(), o);  // each flag's bounds and choices
  const bool text = is_language_model(o.model);
  validate_run(o, text);
  validate_adaptive(o);
  validate_job(o);
  if (text) {
    validate_language_model(o);
  } else if (o.parallel.model_parallel()) {
    throw ConfigError("--pp, --tp and --micro-batches need --model gpt");
  }
  validate_schedule(o);
}

Schedule lr_schedule(const TrainOptions& o, std::int64_t total_steps) {
  Schedule s;
  s.kind = *o.lr_schedule_kind;
  s.step_size = o.step_size.value_or(1);
  s.gamma = o.gamma;
  // The horizon is where the run ends: its epochs, or --max-steps when that comes first.
  if (o.max_steps && *o.max_steps > 0) total_steps = std::min(total_steps, *o.max_steps);
  s.total_steps = std::max<std::int64_t>(total_steps, 1);
  s.warmup_steps = std::min(*o.warmup, s.total_steps);
  s.min_lr = *o.min_lr;
  return s;
}

std::int64_t model_layers(const TrainOptions& o) {
  return o.layers > 0 ? o.layers : is_transformer_model(o.model) ? 4 : 2;
}

GptConfig transformer_config(const TrainOptions& o, std::int64_t vocab) {
  if (!o.model_config.empty()) {  // the file's shape, this run's vocabulary and window
    GptConfig c = hf_config_file(o.model_config);
    c.vocab = vocab;
    c.context = o.context;
    c.recompute = o.recompute;
    return c;
  }
  const bool llama = o.model == "llama";
  GptConfig c{vocab, o.context, o.dim, model_layers(o), o.heads,
              parse_positional(o.positional.value_or(llama ? "rotary" : "learned")), !o.post_ln, o.recompute};
  c.kv_heads = o.kv_heads;
  c.hidden = o.mlp_width;
  if (llama) c = llama_config(c);
  c.rope_theta = o.rope_theta.value_or(10000);
  c.window = o.window;
  return c;
}

}  // namespace weft
