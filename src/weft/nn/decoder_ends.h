// The two ends of a decoder-only transformer (seed 002 chapter 7), written once and run every
// way weft runs a GPT, as its blocks are (decoder_block.h):
//
//   decoder_embed  each row's token embedding plus its position's encoding (a learned table,
//                  fixed sinusoids, or nothing under rotary embeddings, which the blocks apply
//                  to the queries and keys)
//   decoder_head   the final norm, then the head's product: the logits of each row
//
// The ways differ at one seam each:
//
//   TokenRows      the token embedding's rows for ids: whole with autograd (nn/transformer.cpp),
//                  vocabulary-parallel (this rank's rows, zeros for the others', summed over
//                  the ranks: parallel/tensor_parallel.cpp), packed (serve/decoder.cpp)
//   the head       a BlockLinear: the token embedding's transpose when tied or the model's
//                  own lm_head (whole), this rank's vocabulary slice of the logits
//                  (vocabulary-parallel), packed (decoding)
//
// Under no-grad (NoGradGuard) nothing is recorded.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/autograd/variable.h"
#include "weft/nn/decoder_block.h"

namespace weft {

class TokenRows {
 public:
  virtual ~TokenRows() = default;
  virtual Var rows(const std::vector<std::int32_t>& ids) const = 0;  // [N] -> [N, d]
};

// A model's ends, however they are held. `positions` is the table of encodings added by
// position ([context, d]: a learned parameter or fixed sinusoids), undefined under rotary
// embeddings; final_bias undefined under RMSNorm.
struct DecoderEnds {
  std::shared_ptr<const TokenRows> tokens;
  Var positions;
  Var final_weight, final_bias;
  std::shared_ptr<const BlockLinear> head;
};

// The model's input rows: ids[i] at position positions[i] -> [N, d].
Var decoder_embed(const std::vector<std::int32_t>& ids, const std::vector<std::int32_t>& positions,
                  const DecoderEnds& ends);
// The head of rows x [N, d] -> [N, the head's outputs] (the vocabulary, or this rank's slice of it).
Var decoder_head(const Var& x, const DecoderEnds& ends, const BlockConfig& c);

// The token ids a tensor of them holds (as numbers, any shape), in order.
std::vector<std::int32_t> token_ids_of(const Tensor& ids);

// The positions of `batch` whole sequences of `length` rows each, rows sequence by sequence:
// 0, 1, ..., length - 1, 0, 1, ...
std::vector<std::int32_t> sequence_positions(std::int64_t batch, std::int64_t length);

}  // namespace weft
