// Training a language model (GPT, LSTM, RNN) on text: random windows of the training tokens, next-token
// cross-entropy at every position, AdamW with warm-up and cosine decay, validation loss next
// to the unigram entropy, and a generated sample at the end.
#pragma once

#include <cstdio>
#include <string>

namespace weft {

struct LmConfig {
  // gpt | lstm | lstm-seed | rnn | rnn-sigmoid (nn/recurrent.h)
  std::string model = "gpt";
  std::string data = "fortunes";  // or a file or folder of text
  std::string tokenizer = "char";  // char | word
  std::int64_t context = 128;
  std::int64_t layers = 0;  // 0: the model's default (gpt 4, recurrent 2)
  std::int64_t dim = 128;
  std::int64_t heads = 4;
  std::string positional = "learned";  // learned | standard | book
  bool post_ln = false;
  std::int64_t batch = 16;
  std::int64_t steps = 1000;
  double lr = 3e-3;
  std::string optimizer = "adamw";  // adamw | sgd (momentum 0.9)
  double momentum = 0.9;
  double weight_decay = 0.1;
  std::int64_t warmup = 100;
  double clip_grad = 1.0;  // global gradient-norm limit (0: none)
  std::int64_t eval_every = 200;
  std::int64_t eval_batches = 16;
  std::int64_t sample = 200;    // tokens generated at the end
  double temperature = 0.8;
  std::int64_t top_k = 0;
  std::string prompt = "\n";
  std::uint64_t seed = 0;
  int threads = 0;
  bool quiet = false;
  std::string save_model;  // the final parameters (safetensors)
  // Pipeline parallelism (gpt): stages (ranks of the job under weft launch), micro-batches
  // per batch, schedule (naive | gpipe | 1f1b | interleaved | seed), model chunks per stage
  // (interleaved), and how stages are balanced (params | time). pp 1 with micro-batches > 1
  // runs the same schedule in one process (gradient accumulation, or seed's updates).
  int pp = 1;
  int micro_batches = 1;
  std::string pipe_schedule = "1f1b";
  int chunks = 2;
  std::string balance = "params";
  // Tensor parallelism (gpt): ranks splitting every layer (Megatron-LM), and how attention
  // is split: megatron (heads) or seed (seed 002 chapter 8: all-gather Q and K).
  int tp = 1;
  std::string tp_attention = "megatron";
  // Data-parallel replicas (each a pipeline of tensor-parallel stages); world = dp x pp x tp.
  int dp = 1;
  bool recompute = false;  // activation recomputation per transformer block
  std::string precision = "fp32";  // fp32 | bf16 (TrainConfig::precision)
  int zero = 0;            // ZeRO stage over the data-parallel ranks (gpt, with --dp; 0: off)
  // Checkpoints (every `checkpoint_every` steps and at the end; one process or --dp):
  // the model, the optimizer state, the step and the sampler's random state.
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  int keep_checkpoints = 3;
  bool resume = false, auto_resume = false;
};

struct LmSummary {
  std::int64_t parameters = 0;
  std::int64_t vocab = 0;
  std::int64_t train_tokens = 0, val_tokens = 0;
  double unigram_entropy = 0;  // nats per token
  double train_loss = 0, val_loss = 0;
  double tokens_per_second = 0;
  std::string sample;
  std::int64_t sample_words = 0;   // generated words of three letters or more
  double sample_known_words = 0;   // the fraction of those that occur in the corpus
  // Pipeline runs: the measured bubble (mean over the steps after the first) and the
  // (S - 1) / (M + S - 1) of GPipe and 1F1B.
  int pp = 1, micro_batches = 1, tp = 1, dp = 1;
  int rank = 0;  // of this process in a pipeline job (only rank 0 prints the summary)
  std::int64_t peak_step_bytes = 0;
  std::string precision = "fp32";
  std::int64_t rank_parameters = 0;  // parameters rank 0 trains (its shards and stages)
  std::int64_t rank_state_bytes = 0; // tensor memory rank 0 holds before the first step
                                     // (its parameters, other stages' freed)
  std::int64_t resumed_from = -1;    // the step a checkpoint resumed at (-1: none)
  int zero = 0;                      // ZeRO stage, and rank 0's bytes between steps
  std::int64_t zero_parameters = 0, zero_gradients = 0, zero_optimizer = 0;
  std::int64_t zero_step_parameters = 0;  // most parameter bytes gathered during a step
  std::string checkpoint;            // the last checkpoint written  // most tensor memory live during a training step (rank 0)
  std::string pipe_schedule;
  double bubble = 0, bubble_formula = 0;
  std::string to_json() const;
};

LmSummary train_lm(const LmConfig& config, std::FILE* out);

}  // namespace weft
