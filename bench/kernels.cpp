// bench/kernels: GFLOP/s of each kernel class on the shapes weft's models use, per library
// the kernel table can pick, next to OpenBLAS's rate on a large GEMM (the practical peak of
// this machine for float32). Each figure is the median of REPEATS timed rounds after an
// untimed warm-up round (kernels built, memory touched). Run through the bench/kernels
// script, which also times the CNN's whole step.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "decode_shapes.h"
#include "weft/serve/decoder.h"
#include "weft/serve/generation.h"
#include "weft/serve/model_file.h"
#include "weft/serve/quantize.h"
#include "weft/tensor/blas.h"
#include "weft/tensor/conv.h"
#include "weft/tensor/kernel_table.h"
#include "weft/tensor/linalg.h"
#include "weft/tensor/onednn.h"
#include "weft/tensor/rng.h"
#include "weft/tensor/thread_pool.h"
#include "weft/tensor/xsmm.h"

using namespace weft;

extern "C" void omp_set_num_threads(int);

namespace {

int g_repeats = 5;

// Median seconds of one call of fn, over rounds of about 50 ms each.
double seconds_per_call(const std::function<void()>& fn) {
  using Clock = std::chrono::steady_clock;
  fn();
  auto t0 = Clock::now();
  int calls = 0;
  while (std::chrono::duration<double>(Clock::now() - t0).count() < 0.05 || calls < 2) {
    fn();
    ++calls;
  }
  std::vector<double> rounds;
  for (int r = 0; r < g_repeats; ++r) {
    t0 = Clock::now();
    for (int i = 0; i < calls; ++i) fn();
    rounds.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / calls);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

void use(const char* choices) {
  ::setenv("WEFT_KERNELS", choices, 1);
  kernels::reload();
}

void row(const std::string& kind, const std::string& shape, const std::string& library, double flops,
         double seconds, double peak) {
  const double gf = flops / seconds / 1e9;
  std::printf("%-11s %-34s %-12s %9.1f %8.0f%%\n", kind.c_str(), shape.c_str(), library.c_str(), gf,
              100.0 * gf / peak);
}

}  // namespace

// The int8 product's rate on all threads: oneDNN's u8 x s8 -> s32 matmul of 2048^3 (VNNI
// where the processor has it), its own OpenMP team of `threads`, in giga-operations a second
// (a multiply-add counted as 2, as for the float32 rate).
double int8_peak(int threads) {
  const dnnl::memory::dim big = 2048;
  using Dt = dnnl::memory::data_type;
  using Tag = dnnl::memory::format_tag;
  omp_set_num_threads(threads);  // oneDNN sizes the primitive's team when it is made
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc a_md({big, big}, Dt::u8, Tag::ab), b_md({big, big}, Dt::s8, Tag::ab),
      c_md({big, big}, Dt::s32, Tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
  const dnnl::matmul product(pd);
  std::vector<std::uint8_t> a(static_cast<std::size_t>(big * big));
  std::vector<std::int8_t> b(a.size());
  std::vector<std::int32_t> c(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<std::uint8_t>(i * 7 % 251);
    b[i] = static_cast<std::int8_t>(static_cast<int>(i * 13 % 255) - 127);
  }
  const dnnl::memory ma(a_md, engine, a.data()), mb(b_md, engine, b.data()), mc(c_md, engine, c.data());
  const double seconds = seconds_per_call([&] {
    product.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    stream.wait();
  });
  omp_set_num_threads(1);
  return 2.0 * big * big * big / seconds / 1e9;
}

// `kernel_bench peak`: the machine's measured GEMM peak on all threads, for the model
// benchmarks' share of it (bench/model_step, bench/serve): the fastest 2048^3 float32 product
// of OpenBLAS (its own threading) and weft's oneDNN and libxsmm choices ("PEAK_F32
// <GFLOP/s>"), of the bf16 choices where the processor has bf16 instructions ("PEAK_BF16
// <GFLOP/s>", else 0), and oneDNN's int8 product ("PEAK_INT8 <GOP/s>").
int print_peaks() {
  Rng rng(1);
  const std::int64_t big = 2048;
  Tensor a = randn({big, big}, rng), b = randn({big, big}, rng), c = Tensor::empty({big, big});
  const double flops = 2.0 * big * big * big;
  blas::set_threads(get_num_threads());
  double f32 = flops / 1e9 / seconds_per_call([&] {
    blas::sgemm(false, false, big, big, big, 1.0f, a.data<float>(), big, b.data<float>(), big, 0.0f, c.data<float>(), big);
  });
  blas::set_threads(1);
  double bf16 = 0;
  for (const char* choice : {"gemm=onednn", "gemm=libxsmm", "gemm=onednn,bf16=native", "gemm=libxsmm,bf16=native"}) {
    const bool half = std::strstr(choice, "bf16") != nullptr;
    if (half && !onednn::has_bf16_instructions()) continue;
    if (std::strstr(choice, "libxsmm") != nullptr && !(half ? xsmm::has_bf16_kernels() : xsmm::has_f32_kernels())) continue;
    use(choice);
    ops::set_bf16_products(half);
    const double rate = flops / 1e9 / seconds_per_call([&] { ops::gemm(false, false, 1.0, a, b, 0.0, c); });
    ops::set_bf16_products(false);
    (half ? bf16 : f32) = std::max(half ? bf16 : f32, rate);
  }
  use("");
  const double int8 = int8_peak(get_num_threads());
  std::printf("PEAK_F32 %.1f\nPEAK_BF16 %.1f\nPEAK_INT8 %.1f\n", f32, bf16, int8);
  return 0;
}

// `kernel_bench randn [N]`: weft's randn (its uniforms drawn in order, its Box-Muller
// transforms on the pool) against the same normals drawn one by one with Rng::normal (randn
// before session 68), N float32 normals (default 85.3M, the GPT-2 small body's parameters):
// one by one into a preallocated tensor, randn into its own new tensor then copied there (its
// allocation and the copy counted against it), on 1 thread and on all; each figure the median
// of 5 rounds after a warm-up round, the three interleaved.
int print_randn(std::int64_t n) {
  Tensor out = Tensor::zeros({n});
  float* p = out.data<float>();
  auto one_by_one = [&] {
    Rng rng(1);
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(rng.normal(0.0, 0.02));
  };
  auto pooled = [&](int threads) {
    set_num_threads(threads);
    Rng rng(1);
    out.copy_(randn({n}, rng, 0.0, 0.02));
  };
  const int all = get_num_threads();
  using Clock = std::chrono::steady_clock;
  auto time = [](const std::function<void()>& fn) {
    const auto t0 = Clock::now();
    fn();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  std::vector<double> alone, one, many;
  for (int round = 0; round < 6; ++round) {  // (round 0: the warm-up)
    const double a = time(one_by_one), b = time([&] { pooled(1); }), c = time([&] { pooled(all); });
    if (round == 0) continue;
    alone.push_back(a), one.push_back(b), many.push_back(c);
  }
  set_num_threads(all);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("randn of %lld float32 normals (median of 5 after a warm-up): Rng::normal one by one %.3f s; randn on 1 "
              "thread %.3f s (%.2fx), on %d threads %.3f s (%.2fx)\n",
              static_cast<long long>(n), median(alone), median(one), median(alone) / median(one), all, median(many),
              median(alone) / median(many));
  return 0;
}

// `kernel_bench decode [ROWS...]`: a decoding step's products as weft serve runs them, for
// bench/decode_products (which runs bench/onednn_decode.cpp, oneDNN's side, in a process of
// its own, alternated with this). The GPT-2 small body's 48 weight matrices (12 layers of 768
// -> 2,304, 768 -> 768, 768 -> 3,072, 3,072 -> 768: 85M weights, 340 MB in float32, 85 MB in
// int8, read from memory at every step), ROWS rows each (default 1, 16 and 64), all threads:
// PackedLinear::forward on weft's pool, which pauses for the next product as weft serve's
// does; int8 with each row's activations quantized and the outputs scaled back to float32
// (VNNI panels; int8 only where the processor has int8 instructions). Prints
// decode_shapes::print_rate's lines.
int print_decode(const std::vector<std::int64_t>& rows_list) {
  using namespace decode_shapes;
  set_pool_pause(serve::kDecodingPoolPause);
  Rng rng(1);
  for (const bool int8 : {false, true}) {
    if (int8 && !kernels::int8_native()) continue;
    std::vector<serve::PackedLinear> packed;
    for (std::int64_t l = 0; l < kLayers; ++l)
      for (const auto& s : kShapes)
        packed.emplace_back(randn({s[0], s[1]}, rng, 0.0, 0.02), Tensor(),
                            int8 ? serve::WeightFormat::kInt8 : serve::WeightFormat::kF32);
    for (const std::int64_t rows : rows_list) {
      std::vector<Tensor> inputs;
      for (const auto& s : kShapes) inputs.push_back(randn({rows, s[1]}, rng));
      print_rate(int8 ? "int8" : "fp32", rows, [&] {
        for (std::size_t j = 0; j < packed.size(); ++j) (void)packed[j].forward(inputs[j % 4]);
      });
    }
  }
  return 0;
}

// The decoding step alone, in this process (bench/serve's "the step alone" table): the model
// file's decoder with `weights` ("int8"; "int8/bf16" with a bf16 key-value cache, float32
// unless named), for each count of streams S, rounds of S sequences that each take a prompt
// of `prompt` tokens (untimed) and then `steps` steps of one token each, a warm-up round and
// three timed; prints "STEP <weights> <S> <tokens/s> <weight bytes>
// <cache bytes a position> <tokens/s at the mean step>": S over the median step of the timed
// rounds, what a step reads (the weights once, and each sequence's cache at every position it
// holds), and S over their mean step (a served rate is tokens over the whole time: its
// counterpart). The pool pauses between runs as in weft serve. What bench/serve's server adds
// to it (the HTTP front end, its client, sampling, each request's start) is the difference
// between the two tables.
int print_steps(const std::string& path, const std::string& weights, std::int64_t prompt, std::int64_t steps,
                const std::vector<std::int64_t>& streams) {
  set_pool_pause(serve::kDecodingPoolPause);
  const serve::LoadedModel model = serve::load_model(path);
  if (model.language_model() == nullptr) throw ConfigError(path + " is not a language model");
  // WEIGHTS[/CACHE]: the weights' format, and the key-value cache's (fp32 unless named).
  const auto slash = weights.find('/');
  const serve::DecoderFormat format(serve::parse_weight_format(weights.substr(0, slash)),
                                    slash == std::string::npos ? serve::CacheFormat::kF32
                                                               : serve::parse_cache_format(weights.substr(slash + 1)));
  const std::unique_ptr<serve::Decoder> decoder = serve::make_decoder(*model.language_model(), format);
  const auto vocab = static_cast<std::int32_t>(decoder->vocab());
  for (const std::int64_t S : streams) {
    std::vector<double> seconds;
    for (int round = 0; round < 4; ++round) {  // (round 0: warm-up)
      std::vector<std::unique_ptr<serve::SequenceState>> states;
      std::vector<serve::SequenceState*> sequences;
      std::vector<std::vector<std::int32_t>> feeds(static_cast<std::size_t>(S));
      for (std::int64_t i = 0; i < S; ++i) {
        states.push_back(decoder->start());
        sequences.push_back(states.back().get());
        for (std::int64_t k = 0; k < prompt; ++k)
          feeds[static_cast<std::size_t>(i)].push_back(static_cast<std::int32_t>((7 * k + i) % vocab));
      }
      (void)decoder->extend(sequences, feeds);
      for (std::int64_t t = 0; t < steps; ++t) {
        for (std::int64_t i = 0; i < S; ++i) feeds[static_cast<std::size_t>(i)] = {static_cast<std::int32_t>((t + i) % vocab)};
        const auto t0 = std::chrono::steady_clock::now();
        (void)decoder->extend(sequences, feeds);
        if (round > 0) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    std::sort(seconds.begin(), seconds.end());
    const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
    std::printf("STEP %s %lld %.1f %lld %lld %.1f\n", weights.c_str(), static_cast<long long>(S),
                static_cast<double>(S) / seconds[seconds.size() / 2], static_cast<long long>(decoder->weight_bytes()),
                static_cast<long long>(decoder->cache_bytes_per_token()), static_cast<double>(S) / mean);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "step") == 0) {
    // kernel_bench step MODEL WEIGHTS PROMPT STEPS STREAMS...
    const char* usage = "kernel_bench step MODEL fp32|bf16|int8[/CACHE] PROMPT_TOKENS STEPS STREAMS...";
    if (argc < 7) {
      std::fprintf(stderr, "usage: %s\n", usage);
      return 2;
    }
    const std::int64_t prompt = std::atoll(argv[4]), steps = std::atoll(argv[5]);
    std::vector<std::int64_t> streams;
    for (int i = 6; i < argc; ++i) streams.push_back(std::atoll(argv[i]));
    if (prompt < 1 || prompt > 4096 || steps < 1 || steps > 4096 ||
        std::any_of(streams.begin(), streams.end(), [](std::int64_t s) { return s < 1 || s > 256; })) {
      std::fprintf(stderr, "kernel_bench step: prompt tokens and steps must be 1 to 4096, streams 1 to 256 (%s)\n", usage);
      return 2;
    }
    try {
      return print_steps(argv[2], argv[3], prompt, steps, streams);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kernel_bench step: %s\n", e.what());
      return 2;
    }
  }
  if (argc > 1 && std::strcmp(argv[1], "randn") == 0) return print_randn(argc > 2 ? std::atoll(argv[2]) : 85'300'000);
  if (argc > 1 && std::strcmp(argv[1], "decode") == 0) {
    const std::vector<std::int64_t> rows = decode_shapes::rows_from(argc, argv, 2, "kernel_bench decode");
    return rows.empty() ? 2 : print_decode(rows);
  }
  if (argc > 1 && std::strcmp(argv[1], "peak") == 0) {
    g_repeats = 3;
    return print_peaks();
  }
  if (argc > 1) g_repeats = std::max(1, std::atoi(argv[1]));
  Rng rng(1);
  const int threads = get_num_threads();

  // The practical peak: OpenBLAS's own threading on a 2048^3 product.
  const std::int64_t big = 2048;
  Tensor a = randn({big, big}, rng), b = randn({big, big}, rng), c = Tensor::empty({big, big});
  auto blas_big = [&](int t) {
    blas::set_threads(t);
    const double s = seconds_per_call([&] {
      blas::sgemm(false, false, big, big, big, 1.0f, a.data<float>(), big, b.data<float>(), big, 0.0f, c.data<float>(),
                  big);
    });
    blas::set_threads(1);
    return 2.0 * big * big * big / s / 1e9;
  };
  const double peak1 = blas_big(1), peak = blas_big(threads);
  std::printf("bench/kernels: %d threads, %s; median of %d rounds after a warm-up round\n", threads,
              onednn::isa_name().c_str(), g_repeats);
  std::printf("practical peak: OpenBLAS sgemm %lldx%lldx%lld: %.1f GFLOP/s on 1 thread, %.1f on %d\n",
              static_cast<long long>(big), static_cast<long long>(big), static_cast<long long>(big), peak1, peak,
              threads);
  std::printf("%-11s %-34s %-12s %9s %9s\n", "kind", "shape", "library", "GFLOP/s", "of peak");

  // Products as weft runs them (blocks on the pool; attention's heads 64 at a time, one per
  // task, as causal_self_attention runs them), per library, and bf16.
  struct Product {
    std::int64_t m, k, n;
    bool ta, tb;  // the operands as weft stores them: A as [k, m], B as [n, k]
    const char* what;
    std::int64_t heads = 1;
  };
  const Product products[] = {{64, 784, 256, false, true, "mlp layer 1"},
                              {64, 256, 256, false, true, "mlp layer 2"},
                              {2048, 128, 384, false, true, "gpt qkv"},
                              {2048, 512, 128, false, true, "gpt mlp out"},
                              {512, 2048, 128, true, false, "gpt dW (k = tokens)"},
                              // GPT-2 small's (bench/model_step's gpt2-small: batch 8 x 128 tokens)
                              {1024, 768, 2304, false, true, "gpt2-small qkv"},
                              {1024, 3072, 768, false, true, "gpt2-small mlp out"},
                              {1024, 768, 3072, false, false, "gpt2-small dX of mlp out"},
                              {768, 1024, 3072, true, false, "gpt2-small dW (k = tokens)"},
                              {128, 32, 128, false, true, "64 heads q k^T", 64},
                              {128, 128, 32, false, false, "64 heads weights v", 64},
                              {128, 128, 32, true, false, "64 heads d v", 64}};
  struct Library {
    const char* choice;  // WEFT_KERNELS
    const char* label;
    bool bf16;
  };
  const Library libraries[] = {{"gemm=openblas", "openblas", false},
                               {"gemm=onednn", "onednn", false},
                               {"gemm=libxsmm", "libxsmm", false},
                               {"gemm=onednn,bf16=native", "onednn bf16", true},
                               {"gemm=libxsmm,bf16=native", "libxsmm bf16", true}};
  for (const Product& p : products) {
    Tensor x = p.ta ? randn({p.heads, p.k, p.m}, rng) : randn({p.heads, p.m, p.k}, rng);
    Tensor w = p.tb ? randn({p.heads, p.n, p.k}, rng) : randn({p.heads, p.k, p.n}, rng);
    Tensor y = Tensor::empty({p.heads, p.m, p.n});
    const std::string shape = std::to_string(p.m) + "x" + std::to_string(p.k) + "x" + std::to_string(p.n) + " " + p.what;
    for (const Library& lib : libraries) {
      if (lib.bf16 && !onednn::has_bf16_instructions()) continue;
      if (std::strstr(lib.choice, "libxsmm") != nullptr && !(lib.bf16 ? xsmm::has_bf16_kernels() : xsmm::has_f32_kernels()))
        continue;
      use(lib.choice);
      ops::set_bf16_products(lib.bf16);
      const double s = seconds_per_call([&] {
        parallel_for(p.heads, 1, [&](std::int64_t first, std::int64_t last) {
          const bool own = ops::bf16_products();  // (a pool thread's, given back after)
          ops::set_bf16_products(lib.bf16);
          for (std::int64_t h = first; h < last; ++h) {
            Tensor yh = y.select(0, h);
            ops::gemm(p.ta, p.tb, 1.0, x.select(0, h), w.select(0, h), 0.0, yh);
          }
          ops::set_bf16_products(own);
        });
      });
      ops::set_bf16_products(false);
      row("gemm", shape, lib.label, 2.0 * p.m * p.k * p.n * p.heads, s, peak);
    }
  }

  // The CNN's convolutions, forward and backward, batch 64, per library.
  struct ConvCase {
    std::int64_t c, o, h;
  };
  for (ConvCase cc : {ConvCase{1, 32, 28}, ConvCase{32, 64, 14}}) {
    const std::int64_t n = 64;
    Tensor x = randn({n, cc.c, cc.h, cc.h}, rng), w = randn({cc.o, cc.c, 3, 3}, rng), bias = randn({cc.o}, rng);
    const double flops = 2.0 * n * cc.o * cc.h * cc.h * cc.c * 9;
    const std::string shape = "64x" + std::to_string(cc.c) + "x" + std::to_string(cc.h) + "^2 -> " + std::to_string(cc.o);
    for (const char* lib : {"conv=im2col", "conv=onednn"}) {
      use(lib);
      ops::Conv2dForward f = ops::conv2d(x, w, bias, 1, 1);
      Tensor g = randn(f.out.shape(), rng);
      const double fwd = seconds_per_call([&] { f = ops::conv2d(x, w, bias, 1, 1); });
      const bool dx = cc.c > 1;
      const double bwd = seconds_per_call(
          [&] { ops::conv2d_backward(g, x.shape(), w, f.saved, f.saved_is_col, 1, 1, dx, true); });
      const std::string name = std::string(lib).substr(5);
      row("conv fwd", shape, name, flops, fwd, peak);
      row(dx ? "conv bwd" : "conv bwd dW", shape, name, dx ? 2 * flops : flops, bwd, peak);
    }
  }
  // Serving's linear layers (weft serve): float32 weights in weft's panels
  // (serve/weight_panels.h) against the float32 GEMM of the kernel table on the same rows (the
  // reference, and their ratio), int8 widened to float32, int8 products on quantized
  // activations (VNNI), per rows at once; the toy GPT's widths and the GPT-2 small body's.
  for (std::int64_t rows : {1, 16, 256, 2048}) {
    for (auto [in, out] : {std::pair<std::int64_t, std::int64_t>{128, 512}, {512, 128}, {768, 3072}, {3072, 768}}) {
      Tensor x = randn({rows, in}, rng), w = randn({out, in}, rng), bias = randn({out}, rng);
      const std::string shape = std::to_string(rows) + "x" + std::to_string(in) + "x" + std::to_string(out) +
                                (rows <= 16 ? " decode" : " prefill");
      use("");
      serve::PackedLinear f32(w, bias, serve::WeightFormat::kF32);
      const double panels = seconds_per_call([&] { f32.forward(x); });
      const double gemm = seconds_per_call([&] { ops::linear(x, w, &bias); });
      row("linear", shape, "fp32 panels", 2.0 * rows * in * out, panels, peak);
      row("linear", shape, "fp32 gemm", 2.0 * rows * in * out, gemm, peak);
      std::printf("%-11s %-34s %-12s %8.2fx\n", "linear", shape.c_str(), "panels/gemm", gemm / panels);
      // (A layer picks its int8 kernel when it is built: each is built under its choice.)
      use("int8=emulated");
      const serve::PackedLinear widened(w, bias, serve::WeightFormat::kInt8);
      row("linear", shape, "int8 widened", 2.0 * rows * in * out, seconds_per_call([&] { widened.forward(x); }), peak);
      if (onednn::has_int8_instructions()) {
        use("int8=native");
        const serve::PackedLinear vnni(w, bias, serve::WeightFormat::kInt8);
        row("linear", shape, "int8 vnni", 2.0 * rows * in * out, seconds_per_call([&] { vnni.forward(x); }), peak);
      }
    }
  }
  ::unsetenv("WEFT_KERNELS");
  kernels::reload();
  std::printf("PEAK %.1f\n", peak);
  return 0;
}
