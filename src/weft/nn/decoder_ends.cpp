#include "weft/nn/decoder_ends.h"

#include "weft/autograd/functions.h"
#include "weft/autograd/sequence.h"
#include "weft/util/error.h"

namespace weft {

Var decoder_embed(const std::vector<std::int32_t>& ids, const std::vector<std::int32_t>& positions,
                  const DecoderEnds& ends) {
  WEFT_CHECK(ids.size() == positions.size(), "decoder_embed: one position per token");
  const Var x = ends.tokens->rows(ids);
  // (An added row per position: a learned table's gradient sums its rows' in order.)
  return ends.positions.defined() ? add(x, embedding(ends.positions, positions)) : x;
}

Var decoder_head(const Var& x, const DecoderEnds& ends, const BlockConfig& c) {
  return ends.head->forward(block_norm(x, ends.final_weight, ends.final_bias, c));
}

std::vector<std::int32_t> token_ids_of(const Tensor& ids) {
  std::vector<std::int32_t> out;
  out.reserve(static_cast<std::size_t>(ids.numel()));
  for (double v : ids.to_vector()) out.push_back(static_cast<std::int32_t>(v));
  return out;
}

std::vector<std::int32_t> sequence_positions(std::int64_t batch, std::int64_t length) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(batch * length));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::int32_t>(static_cast<std::int64_t>(i) % length);
  return p;
}

}  // namespace weft
