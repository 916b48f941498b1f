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

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Var gelu(const Var& x);

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
Var causal_self_attention(const Var& qkv, std::int64_t heads);

// Elements [start, start + length) of dimension `dim`; backward scatters into a zero tensor.
Var narrow(const Var& x, std::int64_t dim, std::int64_t start, std::int64_t length);

// Concatenation along `dim`; backward splits the gradient.
Var concat(const std::vector<Var>& parts, std::int64_t dim);

}  // namespace weft
