// Recurrent layers and the recurrent language model (seed 002 chapters 5 and 6).
//
//   RNN   h_t = f(x_t Uᵀ + h_{t−1} Wᵀ + b), f = tanh or sigmoid — the standard definition;
//         the notes explain why not the seed's inconsistent one (weighted sum fed back).
//   LSTM  gates from x_t and h_{t−1}, in PyTorch's order i, f, g, o:
//           i = σ(·), f = σ(·), g = act(·), o = σ(·)
//           c_t = f ⊙ c_{t−1} + i ⊙ g,  h_t = o ⊙ act(c_t)
//         standard: act = tanh, with biases; seed (chapter 6's cell): act = ReLU, no biases.
//
// Each layer maps [B, T, in] to [B, T, hidden], starting from zero state; the input
// projection of all T steps is one GEMM, then one small GEMM per step for the recurrence.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "weft/nn/language_model.h"
#include "weft/nn/transformer.h"

namespace weft {

enum class RnnActivation { kTanh, kSigmoid };
enum class LstmVariant { kStandard, kReluNoBias };  // kReluNoBias: seed 002 chapter 6

class RNN : public Module {
 public:
  RNN(std::int64_t input, std::int64_t hidden, Rng& rng, RnnActivation activation = RnnActivation::kTanh);
  Var forward(const Var& x) override;
  std::string describe() const override;

 private:
  std::int64_t input_, hidden_;
  RnnActivation activation_;
  Var w_ih_, w_hh_, bias_;
};

class LSTM : public Module {
 public:
  LSTM(std::int64_t input, std::int64_t hidden, Rng& rng, LstmVariant variant = LstmVariant::kStandard);
  Var forward(const Var& x) override;
  std::string describe() const override;

 private:
  std::int64_t input_, hidden_;
  LstmVariant variant_;
  Var w_ih_, w_hh_, bias_;  // bias undefined in the seed variant
};

// "rnn" | "rnn-sigmoid" | "lstm" | "lstm-seed"
struct RecurrentConfig {
  std::int64_t vocab = 256;
  std::int64_t context = 128;  // the window generation feeds (training windows are as long)
  std::int64_t dim = 128;      // embedding and hidden size
  std::int64_t layers = 2;
  std::string cell = "lstm";
};

// Token embedding, stacked recurrent layers, a linear head to the vocabulary (seed 002
// chapter 6: two stacked LSTM layers and a softmax).
class RecurrentLM : public LanguageModel {
 public:
  RecurrentLM(const RecurrentConfig& config, Rng& rng);
  Var forward(const Var& ids) override;  // [B, T] -> [B, T, vocab]
  std::string describe() const override;
  std::int64_t vocab() const override { return config_.vocab; }
  std::int64_t context() const override { return config_.context; }

 private:
  RecurrentConfig config_;
  std::shared_ptr<Embedding> tokens_;
  std::vector<std::shared_ptr<Module>> layers_;
  std::shared_ptr<Linear> head_;
};

}  // namespace weft
