// Differentiable operations of sequence models: embedding lookup, layer normalization,
// GELU, causal masking, narrowing and concatenation. Like functions.h, each is verified
// against finite differences in double (tests/autograd).
#pragma once

#include <cstdint>
#include <vector>

#include "weft/autograd/variable.h"

namespace weft {

// Rows `ids` of `weight` [V, d]: [ids.size(), d]. Backward adds each row's gradient into its
// vocabulary row (repeated ids accumulate). Throws InternalError for an id outside [0, V).
Var embedding(const Var& weight, const std::vector<std::int32_t>& ids);

// Over the last dimension: (x - mean) / sqrt(var + eps) * gamma + beta, population variance.
// gamma and beta [d] may be undefined (no affine part). One pass per row each way, rows in
// blocks on the pool; gamma's and beta's gradients summed per block, then the blocks in
// order (independent of the thread count).
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps = 1e-5);

// RMS normalization (Zhang & Sennrich 2019; Llama): x / sqrt(mean(x^2) + eps) * gamma over
// the last dimension, gamma [d] (undefined: none); as layer_norm without the mean.
Var rms_norm(const Var& x, const Var& gamma, double eps = 1e-6);

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Var gelu(const Var& x);

// SwiGLU (Shazeer 2020; Llama's MLP): x [..., 2f], the gate's f columns then the up
// product's -> SiLU(gate) * up [..., f], SiLU(a) = a / (1 + e^-a).
Var swiglu(const Var& x);

// Rotary position embeddings (Su et al. 2021), as Hugging Face's Llama applies them: in each
// of the first `heads` heads of every row (hd = 2 x the frequencies' count columns each), the
// pairs (j, j + hd/2) turned by the angle position x inverse_frequencies[j], the row's
// position from `positions`; the columns after those heads pass through. rows [N, width] ->
// [N, width]; backward turns the gradient back.
Var rotary(const Var& rows, const std::vector<std::int32_t>& positions, std::int64_t heads,
           const std::vector<double>& inverse_frequencies);

// For [..., T, T] scores: entries above the diagonal (a query looking at later keys) become
// -infinity, so softmax gives them zero weight. Backward passes gradients below the
// diagonal only.
Var causal_mask(const Var& scores);

// softmax(causal_mask(scores * scale)) in one pass over each row, forward and backward
// (the three operations take ten): the same values, bit for bit, as the three composed, and
// the same gradients within rounding.
Var causal_softmax(const Var& scores, double scale);

// Causal multi-head self-attention from the fused projection qkv [B, T, 3 d] (q, k, v side
// by side, each d = heads x hd): per head softmax(causal_mask(q k^T / sqrt(hd))) v, the heads
// side by side in the output [B, T, d]. One task per (sample, head) reads its q, k and v
// where they lie and writes its output and gradients in place: none of the heads' splitting
// and merging copies, nor the narrowed parts' zero-filled gradients, of the composed form
// (narrow, split_heads, matmul, causal_softmax, matmul, merge_heads), whose values it gives
// within rounding. Saves the operands and the attention weights for backward.
//
// Grouped-query attention (Ainslie et al. 2023; multi-query with one key-value head): with
// kv_heads < heads, qkv is [B, T, (heads + 2 kv_heads) hd] and query head h reads key-value
// head h / (heads / kv_heads); 0 means kv_heads = heads. With a sliding window of `window`
// keys (Mistral; 0: none), query t sees keys max(0, t + 1 - window)..t only.
Var causal_self_attention(const Var& qkv, std::int64_t heads, std::int64_t kv_heads = 0, std::int64_t window = 0);

// Elements [start, start + length) of dimension `dim`; backward scatters into a zero tensor.
Var narrow(const Var& x, std::int64_t dim, std::int64_t start, std::int64_t length);

// Concatenation along `dim`; backward splits the gradient.
Var concat(const std::vector<Var>& parts, std::int64_t dim);

}  // namespace weft
