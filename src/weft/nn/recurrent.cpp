#include "weft/nn/recurrent.h"

#include <cmath>

#include "weft/autograd/functions.h"
#include "weft/autograd/sequence.h"
#include "weft/util/error.h"

namespace weft {

namespace {
// PyTorch's initialization of recurrent weights: uniform(−1/√hidden, 1/√hidden).
Tensor recurrent_init(const Shape& shape, std::int64_t hidden, Rng& rng) {
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden));
  return rand_uniform(shape, rng, -k, k);
}

// x [B, T, in] -> x Wᵀ + b as [B, T, out]: every step's input projection in one GEMM.
Var project_inputs(const Var& x, const Var& w, const Var& bias) {
  const std::int64_t B = x.size(0), T = x.size(1), in = x.size(2);
  return reshape(linear(reshape(x, {B * T, in}), w, bias), {B, T, w.size(0)});
}

Var step_slice(const Var& xw, std::int64_t t) {  // [B, T, n] -> [B, n] at step t
  return reshape(narrow(xw, 1, t, 1), {xw.size(0), xw.size(2)});
}

Var stack_steps(const std::vector<Var>& hs) {  // T × [B, H] -> [B, T, H]
  std::vector<Var> parts;
  parts.reserve(hs.size());
  for (const Var& h : hs) parts.push_back(reshape(h, {h.size(0), 1, h.size(1)}));
  return concat(parts, 1);
}

void check_input(const Var& x, std::int64_t input, const char* layer) {
  if (x.dim() != 3 || x.size(2) != input) {
    throw ConfigError(std::string(layer) + ": input must be [B, T, " + std::to_string(input) + "], got " +
                      shape_to_string(x.shape()));
  }
}
}  // namespace

RNN::RNN(std::int64_t input, std::int64_t hidden, Rng& rng, RnnActivation activation)
    : input_(input), hidden_(hidden), activation_(activation) {
  if (input < 1 || hidden < 1) throw ConfigError("RNN sizes must be positive");
  w_ih_ = register_parameter("weight_ih", recurrent_init({hidden, input}, hidden, rng));
  w_hh_ = register_parameter("weight_hh", recurrent_init({hidden, hidden}, hidden, rng));
  bias_ = register_parameter("bias", recurrent_init({hidden}, hidden, rng));
}

Var RNN::forward(const Var& x) {
  check_input(x, input_, "RNN");
  const std::int64_t B = x.size(0), T = x.size(1);
  Var xw = project_inputs(x, w_ih_, bias_);
  Var h(Tensor::zeros({B, hidden_}, x.value().dtype()));
  std::vector<Var> hs;
  for (std::int64_t t = 0; t < T; ++t) {
    Var z = add(step_slice(xw, t), matmul(h, transpose(w_hh_, 0, 1)));
    h = activation_ == RnnActivation::kTanh ? tanh(z) : sigmoid(z);
    hs.push_back(h);
  }
  return stack_steps(hs);
}

std::string RNN::describe() const {
  return "RNN(" + std::to_string(input_) + " -> " + std::to_string(hidden_) + ", " +
         (activation_ == RnnActivation::kTanh ? "tanh" : "sigmoid") + ")";
}

LSTM::LSTM(std::int64_t input, std::int64_t hidden, Rng& rng, LstmVariant variant)
    : input_(input), hidden_(hidden), variant_(variant) {
  if (input < 1 || hidden < 1) throw ConfigError("LSTM sizes must be positive");
  w_ih_ = register_parameter("weight_ih", recurrent_init({4 * hidden, input}, hidden, rng));
  w_hh_ = register_parameter("weight_hh", recurrent_init({4 * hidden, hidden}, hidden, rng));
  if (variant == LstmVariant::kStandard) bias_ = register_parameter("bias", recurrent_init({4 * hidden}, hidden, rng));
}

Var LSTM::forward(const Var& x) {
  check_input(x, input_, "LSTM");
  const std::int64_t B = x.size(0), T = x.size(1), H = hidden_;
  const bool seed = variant_ == LstmVariant::kReluNoBias;
  auto act = [seed](const Var& v) { return seed ? relu(v) : tanh(v); };
  Var xw = project_inputs(x, w_ih_, bias_);
  Var h(Tensor::zeros({B, H}, x.value().dtype()));
  Var c = h;
  std::vector<Var> hs;
  for (std::int64_t t = 0; t < T; ++t) {
    Var gates = add(step_slice(xw, t), matmul(h, transpose(w_hh_, 0, 1)));  // [B, 4H]: i f g o
    Var i = sigmoid(narrow(gates, 1, 0, H));
    Var f = sigmoid(narrow(gates, 1, H, H));
    Var g = act(narrow(gates, 1, 2 * H, H));
    Var o = sigmoid(narrow(gates, 1, 3 * H, H));
    c = add(mul(f, c), mul(i, g));
    h = mul(o, act(c));
    hs.push_back(h);
  }
  return stack_steps(hs);
}

std::string LSTM::describe() const {
  return "LSTM(" + std::to_string(input_) + " -> " + std::to_string(hidden_) + ", " +
         (variant_ == LstmVariant::kStandard ? "standard" : "seed variant: ReLU, no biases") + ")";
}

RecurrentLM::RecurrentLM(const RecurrentConfig& c, Rng& rng) : config_(c) {
  if (c.vocab < 1 || c.context < 1 || c.dim < 1 || c.layers < 1) throw ConfigError("recurrent model sizes must be positive");
  if (c.cell != "rnn" && c.cell != "rnn-sigmoid" && c.cell != "lstm" && c.cell != "lstm-seed") {
    throw ConfigError("unknown recurrent cell '" + c.cell + "' (known: rnn, rnn-sigmoid, lstm, lstm-seed)");
  }
  tokens_ = std::make_shared<Embedding>(c.vocab, c.dim, rng, 1.0);
  register_module("embed", tokens_);
  for (std::int64_t l = 0; l < c.layers; ++l) {
    std::shared_ptr<Module> layer;
    if (c.cell == "rnn" || c.cell == "rnn-sigmoid") {
      layer = std::make_shared<RNN>(c.dim, c.dim, rng, c.cell == "rnn" ? RnnActivation::kTanh : RnnActivation::kSigmoid);
    } else {
      layer = std::make_shared<LSTM>(c.dim, c.dim, rng, c.cell == "lstm" ? LstmVariant::kStandard : LstmVariant::kReluNoBias);
    }
    layers_.push_back(layer);
    std::string name = c.cell.substr(0, c.cell.find('-'));
    name += std::to_string(l);
    register_module(name, layer);
  }
  head_ = std::make_shared<Linear>(c.dim, c.vocab, rng, true, Init::kXavierNormal);
  register_module("head", head_);
}

Var RecurrentLM::forward(const Var& ids) {
  if (ids.dim() != 2) throw ConfigError("recurrent LM: token ids must be [B, T]");
  const std::int64_t B = ids.size(0), T = ids.size(1), d = config_.dim;
  Var x = tokens_->forward(ids);  // [B, T, d]
  for (auto& layer : layers_) x = layer->forward(x);
  return reshape(head_->forward(reshape(x, {B * T, d})), {B, T, config_.vocab});
}

std::string RecurrentLM::describe() const {
  return "RecurrentLM(" + config_.cell + ", vocab " + std::to_string(config_.vocab) + ", d " +
         std::to_string(config_.dim) + ", " + std::to_string(config_.layers) + " layers)";
}

}  // namespace weft
