#include "weft/serve/decoder.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "weft/autograd/sequence.h"
#include "weft/autograd/variable.h"
#include "weft/tensor/linalg.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/thread_pool.h"
#include "weft/util/error.h"

namespace weft::serve {

namespace {

class GptState : public SequenceState {
 public:
  std::vector<Tensor> k, v;  // per layer: [context, d], rows [0, cached) filled
  std::int64_t cached = 0;
};

// nn's layer normalization (eps 1e-5) and GELU (the tanh approximation), on plain tensors.
Tensor layer_norm_rows(const Tensor& x, const Tensor& w, const Tensor& b) {
  NoGradGuard no_grad;
  return layer_norm(Var(x), Var(w), Var(b)).value();
}

Tensor gelu_of(const Tensor& x) {
  NoGradGuard no_grad;
  return gelu(Var(x)).value();
}

}  // namespace

GptDecoder::GptDecoder(const GPT& model, WeightFormat format, TensorSlice slice, LayerRange layers)
    : c_(model.config()), slice_(std::move(slice)), begin_(layers.begin), end_(layers.end < 0 ? c_.layers : layers.end) {
  if (begin_ < 0 || begin_ >= end_ || end_ > c_.layers)
    throw ConfigError("layers [" + std::to_string(begin_) + ", " + std::to_string(end_) + ") are not a range of the " +
                      std::to_string(c_.layers) + " blocks");
  const std::int64_t n = slice_.size, r = slice_.rank;
  if (n < 1 || r < 0 || r >= n || c_.heads % n != 0)
    throw ConfigError("a GPT with " + std::to_string(c_.heads) + " heads does not split over " + std::to_string(n) +
                      " tensor-parallel ranks");
  ld_ = c_.dim / n;
  lheads_ = c_.heads / n;
  std::map<std::string, Tensor> p;
  for (auto& [name, var] : model.named_parameters()) p[name] = var.value();
  auto get = [&](const std::string& name) {
    auto it = p.find(name);
    if (it == p.end()) throw InternalError("GptDecoder: the model has no parameter " + name);
    return it->second.contiguous();
  };
  head_ = PackedLinear(get("wte.weight"), Tensor(), format);
  if (c_.positional == Positional::kLearned) wpe_ = get("wpe.weight");
  else positions_ = sinusoidal_encoding(c_.context, c_.dim, c_.positional);
  for (std::int64_t i = begin_; i < end_; ++i) {
    std::string h = "h";  // (not "h" + ...: GCC 12 warns falsely on that concatenation)
    h += std::to_string(i);
    h += '.';
    if (n == 1) {
      blocks_.push_back({get(h + "ln1.weight"), get(h + "ln1.bias"), get(h + "ln2.weight"), get(h + "ln2.bias"),
                         PackedLinear(get(h + "attn.qkv.weight"), get(h + "attn.qkv.bias"), format),
                         PackedLinear(get(h + "attn.proj.weight"), get(h + "attn.proj.bias"), format),
                         PackedLinear(get(h + "fc.weight"), get(h + "fc.bias"), format),
                         PackedLinear(get(h + "out.weight"), get(h + "out.bias"), format), Tensor(), Tensor()});
      continue;
    }
    // This rank's rows of Q, K and V (its heads), of the MLP's first layer, and the matching
    // columns of both output projections.
    const std::int64_t d = c_.dim, f = 4 * d / n;
    auto q_k_v = [&](const Tensor& t) {
      std::vector<Tensor> parts;
      for (std::int64_t part = 0; part < 3; ++part) parts.push_back(t.slice(0, part * d + r * ld_, part * d + (r + 1) * ld_));
      const Shape shape = t.dim() == 1 ? Shape{3 * ld_} : Shape{3 * ld_, d};
      Tensor out = Tensor::empty(shape);
      const std::int64_t each = parts[0].numel();
      for (std::int64_t part = 0; part < 3; ++part) {
        Tensor c = parts[static_cast<size_t>(part)].contiguous();
        std::copy(c.data<float>(), c.data<float>() + each, out.data<float>() + part * each);
      }
      return out;
    };
    blocks_.push_back({get(h + "ln1.weight"), get(h + "ln1.bias"), get(h + "ln2.weight"), get(h + "ln2.bias"),
                       PackedLinear(q_k_v(get(h + "attn.qkv.weight")), q_k_v(get(h + "attn.qkv.bias")), format),
                       PackedLinear(get(h + "attn.proj.weight").slice(1, r * ld_, (r + 1) * ld_).contiguous(), Tensor(), format),
                       PackedLinear(get(h + "fc.weight").slice(0, r * f, (r + 1) * f).contiguous(),
                                    get(h + "fc.bias").slice(0, r * f, (r + 1) * f).contiguous(), format),
                       PackedLinear(get(h + "out.weight").slice(1, r * f, (r + 1) * f).contiguous(), Tensor(), format),
                       get(h + "attn.proj.bias"), get(h + "out.bias")});
  }
  lnf_w_ = get("ln_f.weight");
  lnf_b_ = get("ln_f.bias");
}

std::unique_ptr<SequenceState> GptDecoder::start() const {
  auto s = std::make_unique<GptState>();
  for (std::int64_t l = begin_; l < end_; ++l) {
    s->k.push_back(Tensor::empty({c_.context, ld_}));
    s->v.push_back(Tensor::empty({c_.context, ld_}));
  }
  return s;
}

// Each new row's attention over its sequence's cache (the new keys and values written first).
void GptDecoder::attention(const std::vector<SequenceState*>& sequences, const std::vector<std::int64_t>& first_row,
                           const std::vector<std::int64_t>& rows, std::int64_t layer, const Tensor& qkv,
                           Tensor& out) const {
  const std::int64_t d = ld_, H = lheads_, hd = d / H;
  const auto S = static_cast<std::int64_t>(sequences.size());
  const float* q_all = qkv.data<float>();
  for (std::int64_t i = 0; i < S; ++i) {
    auto* s = static_cast<GptState*>(sequences[static_cast<size_t>(i)]);
    float* k = s->k[static_cast<size_t>(layer)].data<float>();
    float* v = s->v[static_cast<size_t>(layer)].data<float>();
    for (std::int64_t r = 0; r < rows[static_cast<size_t>(i)]; ++r) {
      const float* src = q_all + (first_row[static_cast<size_t>(i)] + r) * 3 * d;
      std::copy(src + d, src + 2 * d, k + (s->cached + r) * d);
      std::copy(src + 2 * d, src + 3 * d, v + (s->cached + r) * d);
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* o = out.data<float>();
  parallel_loop(S * H, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> w(static_cast<size_t>(c_.context));
    for (std::int64_t job = begin; job < end; ++job) {
      const std::int64_t i = job / H, h = job % H;
      auto* s = static_cast<GptState*>(sequences[static_cast<size_t>(i)]);
      const float* k = s->k[static_cast<size_t>(layer)].data<float>() + h * hd;
      const float* v = s->v[static_cast<size_t>(layer)].data<float>() + h * hd;
      for (std::int64_t r = 0; r < rows[static_cast<size_t>(i)]; ++r) {
        const std::int64_t row = first_row[static_cast<size_t>(i)] + r, keys = s->cached + r + 1;
        const float* q = q_all + row * 3 * d + h * hd;
        float top = -INFINITY;
        for (std::int64_t j = 0; j < keys; ++j) {
          float dot = 0;
          for (std::int64_t e = 0; e < hd; ++e) dot += q[e] * k[j * d + e];
          w[static_cast<size_t>(j)] = dot * scale;
          top = std::max(top, w[static_cast<size_t>(j)]);
        }
        float total = 0;
        for (std::int64_t j = 0; j < keys; ++j) total += w[static_cast<size_t>(j)] = std::exp(w[static_cast<size_t>(j)] - top);
        float* dst = o + row * d + h * hd;
        std::fill(dst, dst + hd, 0.0f);
        for (std::int64_t j = 0; j < keys; ++j) {
          const float a = w[static_cast<size_t>(j)] / total;
          for (std::int64_t e = 0; e < hd; ++e) dst[e] += a * v[j * d + e];
        }
      }
    }
  });
}

GptDecoder::StepPlan GptDecoder::plan(const std::vector<SequenceState*>& sequences,
                                      const std::vector<std::vector<std::int32_t>>& tokens) const {
  WEFT_CHECK(sequences.size() == tokens.size(), "GptDecoder: one list of tokens per sequence");
  for (const auto& t : tokens) {
    WEFT_CHECK(!t.empty(), "GptDecoder: a step feeds at least one token per sequence");
    for (std::int32_t id : t) WEFT_CHECK(id >= 0 && id < c_.vocab, "GptDecoder: a token outside the vocabulary");
  }
  const auto S = static_cast<std::int64_t>(sequences.size());
  StepPlan p;
  p.feed.resize(static_cast<size_t>(S));
  for (std::int64_t i = 0; i < S; ++i) {
    auto* s = static_cast<GptState*>(sequences[static_cast<size_t>(i)]);
    const auto& t = tokens[static_cast<size_t>(i)];
    s->tokens.insert(s->tokens.end(), t.begin(), t.end());
    auto& f = p.feed[static_cast<size_t>(i)];
    if (s->cached + static_cast<std::int64_t>(t.size()) > c_.context) {
      s->cached = 0;
      f.assign(s->tokens.end() - std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(s->tokens.size()), c_.context),
               s->tokens.end());
    } else {
      f = t;
    }
    p.first_row.push_back(p.rows_total);
    p.rows.push_back(static_cast<std::int64_t>(f.size()));
    p.rows_total += p.rows.back();
  }
  return p;
}

Tensor GptDecoder::embed(const std::vector<SequenceState*>& sequences, const StepPlan& p) const {
  const std::int64_t d = c_.dim;
  Tensor x = Tensor::empty({p.rows_total, d});
  float* xp = x.data<float>();
  const float* pos = (wpe_.defined() ? wpe_ : positions_).data<float>();
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    auto* s = static_cast<GptState*>(sequences[i]);
    const auto& f = p.feed[i];
    for (std::size_t r = 0; r < f.size(); ++r) {
      float* xr = xp + (p.first_row[i] + static_cast<std::int64_t>(r)) * d;
      head_.row(f[r], xr);
      const float* at = pos + (s->cached + static_cast<std::int64_t>(r)) * d;
      for (std::int64_t k = 0; k < d; ++k) xr[k] += at[k];
    }
  }
  return x;
}

void GptDecoder::run_blocks(const std::vector<SequenceState*>& sequences, const StepPlan& p, Tensor& x) const {
  Tensor att = Tensor::empty({p.rows_total, ld_});
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    const auto layer = static_cast<std::int64_t>(l);
    if (c_.pre_ln) {
      Tensor qkv = b.qkv.forward(layer_norm_rows(x, b.ln1_w, b.ln1_b));
      attention(sequences, p.first_row, p.rows, layer, qkv, att);
      ops::add_(x, project(b.proj, b.proj_b, att));
      const Tensor f = gelu_of(b.fc.forward(layer_norm_rows(x, b.ln2_w, b.ln2_b)));
      ops::add_(x, project(b.out, b.out_b, f));
    } else {
      Tensor qkv = b.qkv.forward(x);
      attention(sequences, p.first_row, p.rows, layer, qkv, att);
      ops::add_(x, project(b.proj, b.proj_b, att));
      x = layer_norm_rows(x, b.ln1_w, b.ln1_b);
      const Tensor f = gelu_of(b.fc.forward(x));
      ops::add_(x, project(b.out, b.out_b, f));
      x = layer_norm_rows(x, b.ln2_w, b.ln2_b);
    }
  }
}

void GptDecoder::finish(const std::vector<SequenceState*>& sequences, const StepPlan& p) const {
  for (std::size_t i = 0; i < sequences.size(); ++i) static_cast<GptState*>(sequences[i])->cached += p.rows[i];
}

Tensor GptDecoder::head(const StepPlan& p, const Tensor& x) const {
  const std::int64_t d = c_.dim;
  const auto S = static_cast<std::int64_t>(p.rows.size());
  Tensor last = Tensor::empty({S, d});
  const float* xp = x.data<float>();
  for (std::int64_t i = 0; i < S; ++i) {
    const std::int64_t row = p.first_row[static_cast<size_t>(i)] + p.rows[static_cast<size_t>(i)] - 1;
    std::copy(xp + row * d, xp + (row + 1) * d, last.data<float>() + i * d);
  }
  return head_.forward(layer_norm_rows(last, lnf_w_, lnf_b_));
}

Tensor GptDecoder::extend(const std::vector<SequenceState*>& sequences,
                          const std::vector<std::vector<std::int32_t>>& tokens) {
  WEFT_CHECK(begin_ == 0 && end_ == c_.layers, "GptDecoder::extend needs every layer (a pipeline stage runs pieces)");
  const StepPlan p = plan(sequences, tokens);
  Tensor x = embed(sequences, p);
  run_blocks(sequences, p, x);
  finish(sequences, p);
  return head(p, x);
}

Tensor GptDecoder::project(const PackedLinear& w, const Tensor& bias, const Tensor& x) const {
  Tensor y = w.forward(x);
  if (slice_.size == 1) return y;  // (the bias is inside)
  slice_.all_reduce(y);
  ops::add_(y, bias);
  return y;
}

std::int64_t GptDecoder::weight_bytes() const {
  std::int64_t bytes = head_.bytes() + 4 * (wpe_.defined() ? wpe_.numel() : 0) + 4 * 2 * c_.dim;
  for (const Block& b : blocks_)
    bytes += b.qkv.bytes() + b.proj.bytes() + b.fc.bytes() + b.out.bytes() +
             4 * (4 * c_.dim + b.qkv.out_features() + b.proj.out_features() + b.fc.out_features() + b.out.out_features());
  return bytes;
}

Tensor WindowDecoder::extend(const std::vector<SequenceState*>& sequences,
                             const std::vector<std::vector<std::int32_t>>& tokens) {
  WEFT_CHECK(sequences.size() == tokens.size(), "WindowDecoder: one list of tokens per sequence");
  const std::int64_t V = model_.vocab();
  Tensor logits = Tensor::empty({static_cast<std::int64_t>(sequences.size()), V});
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    auto& all = sequences[i]->tokens;
    for (std::int32_t id : tokens[i]) WEFT_CHECK(id >= 0 && id < V, "WindowDecoder: a token outside the vocabulary");
    all.insert(all.end(), tokens[i].begin(), tokens[i].end());
    const Tensor out = model_.next_token_logits(all);
    std::copy(out.data<float>(), out.data<float>() + V, logits.data<float>() + static_cast<std::int64_t>(i) * V);
  }
  return logits;
}

std::unique_ptr<Decoder> make_decoder(LanguageModel& model, WeightFormat format) {
  if (auto* gpt = dynamic_cast<GPT*>(&model)) return std::make_unique<GptDecoder>(*gpt, format);
  if (format != WeightFormat::kF32)
    throw ConfigError(std::string("weights in ") + weight_format_name(format) + " are built for GPT models only");
  return std::make_unique<WindowDecoder>(model);
}

}  // namespace weft::serve
