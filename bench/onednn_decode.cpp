// bench/decode_products' reference side: oneDNN's matmul at a decoding step's shapes, in a
// program of its own (nothing of weft's linked: its pool's threads would share the cores).
// The GPT-2 small body's 48 weight matrices (12 layers of 768 -> 2,304, 768 -> 768, 768 ->
// 3,072, 3,072 -> 768; 85M weights, read from memory at every step), ROWS rows each (default
// 1, 16 and 64), on oneDNN's OpenMP team (OMP_NUM_THREADS; bench/decode_products sets
// OMP_WAIT_POLICY=active, its best for calls this short). The weights in the layout oneDNN
// chooses for the shape (reordered once, untimed). float32, and int8 as u8 x s8 -> s32: the
// product alone, less work than weft's int8 (no activations quantized, no outputs scaled).
// Prints "DECODE <weights> <rows> <GOP/s>" (2 per multiply-add), the median of 30 steps after
// 3 warm-up steps. usage: onednn_decode [ROWS...]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

int main(int argc, char** argv) {
  std::vector<long> rows_list;
  for (int i = 1; i < argc; ++i) {
    const long rows = std::atol(argv[i]);
    if (rows < 1 || rows > 4096) {
      std::fprintf(stderr, "onednn_decode: rows must be 1 to 4096, got '%s'\n", argv[i]);
      return 2;
    }
    rows_list.push_back(rows);
  }
  if (rows_list.empty()) rows_list = {1, 16, 64};
  using Dt = dnnl::memory::data_type;
  using Tag = dnnl::memory::format_tag;
  const long d = 768, layers = 12;
  const long shapes[4][2] = {{3 * d, d}, {d, d}, {4 * d, d}, {d, 4 * d}};  // out, in
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  for (const bool int8 : {false, true}) {
    for (const long rows : rows_list) {
      std::vector<dnnl::matmul> prims;
      std::vector<dnnl::memory> srcs, weights, dsts;
      double ops = 0;
      for (long l = 0; l < layers; ++l)
        for (const auto& s : shapes) {
          const long out = s[0], in = s[1];
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
          ops += 2.0 * static_cast<double>(rows * out * in);
        }
      stream.wait();
      std::vector<double> seconds;
      for (int i = 0; i < 33; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        for (std::size_t j = 0; j < prims.size(); ++j)
          prims[j].execute(stream, {{DNNL_ARG_SRC, srcs[j]}, {DNNL_ARG_WEIGHTS, weights[j]}, {DNNL_ARG_DST, dsts[j]}});
        stream.wait();
        if (i >= 3) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(seconds.begin(), seconds.end());
      std::printf("DECODE %s %ld %.1f\n", int8 ? "int8" : "fp32", rows, ops / seconds[seconds.size() / 2] / 1e9);
    }
  }
  return 0;
}
