// bench/decode_products' reference side: oneDNN's matmul at a decoding step's shapes, in a
// program of its own (nothing of weft's linked: its pool's threads would share the cores).
// The GPT-2 small body's 48 weight matrices (12 layers of 768 -> 2,304, 768 -> 768, 768 ->
// 3,072, 3,072 -> 768; 85M weights, read from memory at every step), ROWS rows each (default
// 1, 16 and 64), on oneDNN's OpenMP team (OMP_NUM_THREADS; bench/decode_products sets
// OMP_WAIT_POLICY=active, its best for calls this short). The weights in the layout oneDNN
// chooses for the shape (reordered once, untimed). float32, and int8 as u8 x s8 -> s32: the
// product alone, less work than weft's int8 (no activations quantized, no outputs scaled).
// Prints decode_shapes::print_rate's lines. usage: onednn_decode [ROWS...]
#include <cstring>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "decode_shapes.h"

int main(int argc, char** argv) {
  using namespace decode_shapes;
  const std::vector<std::int64_t> rows_list = rows_from(argc, argv, 1, "onednn_decode");
  if (rows_list.empty()) return 2;
  using Dt = dnnl::memory::data_type;
  using Tag = dnnl::memory::format_tag;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  for (const bool int8 : {false, true}) {
    for (const std::int64_t rows : rows_list) {
      std::vector<dnnl::matmul> prims;
      std::vector<dnnl::memory> srcs, weights, dsts;
      for (std::int64_t l = 0; l < kLayers; ++l)
        for (const auto& s : kShapes) {
          const std::int64_t out = s[0], in = s[1];
          const dnnl::memory::desc a_md({rows, in}, int8 ? Dt::u8 : Dt::f32, Tag::ab),
              w_any({in, out}, int8 ? Dt::s8 : Dt::f32, Tag::any), w_plain({in, out}, int8 ? Dt::s8 : Dt::f32, Tag::ab),
              c_md({rows, out}, int8 ? Dt::s32 : Dt::f32, Tag::ab);
          const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, w_any, c_md), engine);
          prims.emplace_back(pd);
          dnnl::memory plain(w_plain, engine);
          std::memset(plain.get_data_handle(), 1, w_plain.get_size());
          weights.emplace_back(pd.weights_desc(), engine);
          dnnl::reorder(plain, weights.back()).execute(stream, plain, weights.back());
          srcs.emplace_back(a_md, engine);
          std::memset(srcs.back().get_data_handle(), 1, a_md.get_size());
          dsts.emplace_back(c_md, engine);
        }
      stream.wait();
      print_rate(int8 ? "int8" : "fp32", rows, [&] {
        for (std::size_t j = 0; j < prims.size(); ++j)
          prims[j].execute(stream, {{DNNL_ARG_SRC, srcs[j]}, {DNNL_ARG_WEIGHTS, weights[j]}, {DNNL_ARG_DST, dsts[j]}});
        stream.wait();
      });
    }
  }
  return 0;
}
