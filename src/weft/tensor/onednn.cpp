#include "weft/tensor/onednn.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "weft/util/cpu.h"
#include "weft/util/error.h"

// Debian's oneDNN runs its primitives on OpenMP; weft calls each one from a single thread.
extern "C" void omp_set_num_threads(int);

namespace weft::onednn {

namespace {

// Primitives kept per key; built under the lock, executed outside it (a primitive may run
// on several threads at once: each call brings its own scratchpad).
template <class Key, class Value>
class Cache {
 public:
  template <class Make>
  std::shared_ptr<const Value> get(const Key& key, Make make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = items_[key];
    if (!slot) slot = std::make_shared<const Value>(make());
    return slot;
  }

 private:
  std::mutex mu_;
  std::map<Key, std::shared_ptr<const Value>> items_;
};

struct MatmulPlan {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

using dnnl::memory;
using Tag = memory::format_tag;
using Type = memory::data_type;

// The instruction-set cap (WEFT_CPU_ISA, read and checked by util/cpu.h) applies before
// oneDNN builds its first kernel.
void set_isa_cap() {
  static const std::map<std::string, dnnl::cpu_isa> caps = {
      {"sse41", dnnl::cpu_isa::sse41},
      {"avx2", dnnl::cpu_isa::avx2},
      {"avx512_core", dnnl::cpu_isa::avx512_core},
      {"avx512_core_vnni", dnnl::cpu_isa::avx512_core_vnni},
      {"avx512_core_bf16", dnnl::cpu_isa::avx512_core_bf16}};
  const auto it = caps.find(cpu::isa_cap());
  if (it != caps.end()) dnnl::set_max_cpu_isa(it->second);
}

// The engine, for a calling thread whose OpenMP team is itself alone: oneDNN sizes a
// primitive's team when it builds it, so this holds before anything is built.
const dnnl::engine& engine() {
  static const dnnl::engine e = [] {
    set_isa_cap();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  thread_local const bool single = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)single;
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

unsigned effective_isa() {
  engine();
  return static_cast<unsigned>(dnnl::get_effective_cpu_isa());
}

memory::desc strided(std::int64_t rows, std::int64_t cols, Type t, std::int64_t rs, std::int64_t cs) {
  return memory::desc({rows, cols}, t, memory::dims{rs, cs});
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void run(const dnnl::primitive& p, const dnnl::memory::desc& scratch_desc,
         std::unordered_map<int, memory> args) {
  auto& s = stream();
  memory scratch(scratch_desc, engine());
  args.emplace(DNNL_ARG_SCRATCHPAD, scratch);
  p.execute(s, args);
  s.wait();
}


// c = a b (+ c when accumulate).
using MatmulKey = std::tuple<int, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                             std::int64_t, std::int64_t, std::int64_t, bool>;

// oneDNN 2.6's brgemm kernels take an operand or a result only when it is dense (a row-major
// result n wide; a transposed operand whose columns lie next to each other): a block of a
// wider matrix otherwise goes to gemm:jit, whose first call in a process builds every sgemm
// kernel it has (50-95 ms and about 2,500 page faults on an AVX-512 machine; weft's column
// blocks of products of fewer than 128 rows are such blocks). A plan copies the operands it
// names into dense buffers first, and places its result from one.
struct DenseCopies {
  bool a = false, b = false, c = false;
  bool operator==(const DenseCopies&) const = default;
};
struct StagedPlan {
  MatmulPlan plan;
  DenseCopies copies;
};

// An operand's dense layout: rows next to each other (row-major), or, when transposed,
// columns next to each other.
Operand dense_layout(Operand x, std::int64_t rows, std::int64_t cols) {
  const bool transposed = x.row_stride == 1 && x.col_stride != 1;
  return transposed ? Operand{nullptr, 1, rows} : Operand{nullptr, cols, 1};
}

// Copies x (rows x cols, elements of `bytes` bytes) into `to` in dense_layout.
void copy_dense(Operand x, std::int64_t rows, std::int64_t cols, std::size_t bytes, std::vector<char>& to) {
  const Operand d = dense_layout(x, rows, cols);
  to.resize(static_cast<std::size_t>(rows * cols) * bytes);
  const char* from = static_cast<const char*>(x.p);
  // Runs of the dense layout's contiguous dimension: rows when row-major, columns otherwise.
  const bool by_rows = d.col_stride == 1;
  const std::int64_t runs = by_rows ? rows : cols, run = by_rows ? cols : rows;
  const std::int64_t step = by_rows ? x.row_stride : x.col_stride;
  for (std::int64_t r = 0; r < runs; ++r)
    std::memcpy(to.data() + static_cast<std::size_t>(r * run) * bytes, from + static_cast<std::size_t>(r * step) * bytes,
                static_cast<std::size_t>(run) * bytes);
}

// Puts a dense m x n block into c (rows ldc apart), or adds it to what is there.
void place_dense(const float* block, std::int64_t m, std::int64_t n, float* c, std::int64_t ldc, bool add) {
  for (std::int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    const float* got = block + i * n;
    if (add)
      for (std::int64_t j = 0; j < n; ++j) row[j] += got[j];
    else
      std::copy(got, got + n, row);
  }
}

bool is_brgemm(const dnnl::matmul::primitive_desc& pd) { return std::string(pd.impl_info_str()).rfind("brg", 0) == 0; }

StagedPlan plan_matmul(Type t, std::int64_t m, std::int64_t n, std::int64_t k, Operand a, Operand b, std::int64_t ldc,
                       bool accumulate) {
  auto describe = [&](DenseCopies d) {
    // (a dense copy of the result is added to its place afterwards: place_dense)
    dnnl::primitive_attr attr = user_scratchpad();
    if (accumulate && !d.c) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const Operand da = d.a ? dense_layout(a, m, k) : a, db = d.b ? dense_layout(b, k, n) : b;
    return dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(strided(m, k, t, da.row_stride, da.col_stride), strided(k, n, t, db.row_stride, db.col_stride),
                           strided(m, n, Type::f32, d.c ? n : ldc, 1)),
        attr, engine());
  };
  // The fewest copies that reach brgemm; where none does, the operands as they are.
  auto as_is = describe({});
  if (is_brgemm(as_is)) return StagedPlan{MatmulPlan{as_is, dnnl::matmul(as_is)}, {}};
  const bool a_dense = a.col_stride == 1 ? a.row_stride == k : a.col_stride == m;
  const bool b_dense = b.col_stride == 1 ? b.row_stride == n : b.col_stride == k;
  const DenseCopies tries[] = {{false, false, ldc != n}, {!a_dense, !b_dense, ldc != n}};  // the result, then all
  for (int i = 0; i < 2; ++i) {
    const DenseCopies d = tries[i];
    if (d == DenseCopies{} || (i == 1 && d == tries[0])) continue;  // tried
    auto pd = describe(d);
    if (is_brgemm(pd)) return StagedPlan{MatmulPlan{pd, dnnl::matmul(pd)}, d};
  }
  return StagedPlan{MatmulPlan{as_is, dnnl::matmul(as_is)}, {}};
}

void matmul(Type t, std::int64_t m, std::int64_t n, std::int64_t k, Operand a, Operand b, float* c,
            std::int64_t ldc, bool accumulate) {
  static Cache<MatmulKey, StagedPlan> cache;
  const MatmulKey key{static_cast<int>(t), m, n, k, a.row_stride, a.col_stride, b.row_stride, b.col_stride, ldc,
                      accumulate};
  auto staged = cache.get(key, [&] { return plan_matmul(t, m, n, k, a, b, ldc, accumulate); });
  const MatmulPlan& plan = staged->plan;
  const DenseCopies& d = staged->copies;
  const std::size_t bytes = t == Type::f32 ? 4 : 2;
  thread_local std::vector<char> a_copy, b_copy;
  thread_local std::vector<float> c_copy;
  const void* pa = a.p;
  const void* pb = b.p;
  float* pc = c;
  if (d.a) copy_dense(a, m, k, bytes, a_copy), pa = a_copy.data();
  if (d.b) copy_dense(b, k, n, bytes, b_copy), pb = b_copy.data();
  if (d.c) {
    c_copy.resize(static_cast<std::size_t>(m * n));
    pc = c_copy.data();
  }
  const auto& e = engine();
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(plan.pd.src_desc(), e, const_cast<void*>(pa))},
                                       {DNNL_ARG_WEIGHTS, memory(plan.pd.weights_desc(), e, const_cast<void*>(pb))},
                                       {DNNL_ARG_DST, memory(plan.pd.dst_desc(), e, pc)}};
  run(plan.prim, plan.pd.scratchpad_desc(), std::move(args));
  if (d.c) place_dense(pc, m, n, c, ldc, accumulate);
}

}  // namespace

namespace {

// A convolution's three primitives, in the layouts oneDNN picks for them (blocked channels
// where that is faster), and the plain NCHW layouts of weft's tensors.
struct ConvPlan {
  memory::desc x, w, y, b;  // plain
  dnnl::convolution_forward::primitive_desc fwd;
  dnnl::convolution_backward_data::primitive_desc bwd_data;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights;
  dnnl::convolution_forward fwd_prim;
  dnnl::convolution_backward_data bwd_data_prim;
  dnnl::convolution_backward_weights bwd_weights_prim;
};

std::shared_ptr<const ConvPlan> conv_plan(const ConvShape& s) {
  static Cache<ConvShape, ConvPlan> cache;
  return cache.get(s, [&] {
    const auto& e = engine();
    memory::desc x({s.n, s.c, s.h, s.w}, Type::f32, Tag::nchw), w({s.o, s.c, s.kh, s.kw}, Type::f32, Tag::oihw),
        y({s.n, s.o, s.oh, s.ow}, Type::f32, Tag::nchw), b({s.o}, Type::f32, Tag::x);
    // The operands' type (bf16 or f32); results (outputs and gradients) are f32.
    const Type in = s.bf16 ? Type::bf16 : Type::f32;
    auto any = [](const memory::dims& d, Type t) { return memory::desc(d, t, Tag::any); };
    const memory::dims xd{s.n, s.c, s.h, s.w}, wd{s.o, s.c, s.kh, s.kw}, yd{s.n, s.o, s.oh, s.ow};
    const memory::dims strides{s.stride, s.stride}, pad{s.pad, s.pad};
    const auto attr = user_scratchpad();
    dnnl::convolution_forward::primitive_desc fwd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                        any(xd, in), any(wd, in), b, any(yd, Type::f32), strides, pad, pad),
        attr, e);
    dnnl::convolution_backward_data::primitive_desc bwd_data(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any(xd, Type::f32), any(wd, in),
                                              any(yd, in), strides, pad, pad),
        attr, e, fwd);
    dnnl::convolution_backward_weights::primitive_desc bwd_weights(
        dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, any(xd, in),
                                                 any(wd, Type::f32), b, any(yd, in), strides, pad, pad),
        attr, e, fwd);
    return ConvPlan{x, w, y, b, fwd, bwd_data, bwd_weights,
                    dnnl::convolution_forward(fwd), dnnl::convolution_backward_data(bwd_data),
                    dnnl::convolution_backward_weights(bwd_weights)};
  });
}

// `user` as the primitive wants it: the same memory when the layouts agree, else a copy in
// the primitive's layout and type (reordered now when `fill`; to bf16 by rounding to
// nearest even).
memory in_layout(const memory::desc& want, const memory::desc& plain, const void* p, bool fill) {
  const auto& e = engine();
  memory user(plain, e, const_cast<void*>(p));
  if (want == plain) return user;
  memory m(want, e);
  if (fill) {
    dnnl::reorder(user, m).execute(stream(), user, m);
    stream().wait();
  }
  return m;
}

// Copies `m` back to the plain buffer p when it is not already that buffer.
void out_of_layout(const memory& m, const memory::desc& plain, void* p) {
  if (m.get_desc() == plain) return;
  memory user(plain, engine(), p);
  dnnl::reorder(m, user).execute(stream(), const_cast<memory&>(m), user);
  stream().wait();
}

}  // namespace

bool has_bf16_instructions() { return (effective_isa() & 0xe7u) == 0xe7u; }
bool has_int8_instructions() {
  const unsigned isa = effective_isa();
  return (isa & 0x67u) == 0x67u || (isa & 0x407u) == 0x407u;
}
std::string isa_name() {
  const unsigned isa = effective_isa();
  if ((isa & 0x3e7u) == 0x3e7u) return "avx512_core_amx";
  if ((isa & 0xe7u) == 0xe7u) return "avx512_core_bf16";
  if ((isa & 0x67u) == 0x67u) return "avx512_core_vnni";
  if ((isa & 0x27u) == 0x27u) return "avx512_core";
  if ((isa & 0x407u) == 0x407u) return "avx2_vnni";
  if ((isa & 0x7u) == 0x7u) return "avx2";
  if ((isa & 0x3u) == 0x3u) return "avx";
  if ((isa & 0x1u) == 0x1u) return "sse41";
  return "below sse41";
}

void matmul_f32(std::int64_t m, std::int64_t n, std::int64_t k, Operand a, Operand b, float* c, std::int64_t ldc,
                bool accumulate) {
  matmul(Type::f32, m, n, k, a, b, c, ldc, accumulate);
}

void matmul_bf16(std::int64_t m, std::int64_t n, std::int64_t k, Operand a, Operand b, float* c, std::int64_t ldc,
                 bool accumulate) {
  matmul(Type::bf16, m, n, k, a, b, c, ldc, accumulate);
}

void conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  auto plan = conv_plan(s);
  memory mx = in_layout(plan->fwd.src_desc(), plan->x, x, true);
  memory mw = in_layout(plan->fwd.weights_desc(), plan->w, w, true);
  memory my = in_layout(plan->fwd.dst_desc(), plan->y, y, false);
  std::vector<float> zero;
  if (bias == nullptr) zero.assign(static_cast<std::size_t>(s.o), 0.0f);
  memory mb(plan->b, engine(), const_cast<float*>(bias ? bias : zero.data()));
  run(plan->fwd_prim, plan->fwd.scratchpad_desc(),
      {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, my}});
  out_of_layout(my, plan->y, y);
}

void conv_backward(const ConvShape& s, const float* x, const float* dy, const float* w, float* dx, float* dw,
                   float* db) {
  auto plan = conv_plan(s);
  // dy in the weights' gradient's layout, and in the input gradient's when that differs.
  memory mdy = in_layout(plan->bwd_weights.diff_dst_desc(), plan->y, dy, true);
  memory mx = in_layout(plan->bwd_weights.src_desc(), plan->x, x, true);
  memory mdw = in_layout(plan->bwd_weights.diff_weights_desc(), plan->w, dw, false);
  memory mdb(plan->b, engine(), db);
  run(plan->bwd_weights_prim, plan->bwd_weights.scratchpad_desc(),
      {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_DIFF_WEIGHTS, mdw}, {DNNL_ARG_DIFF_BIAS, mdb}});
  out_of_layout(mdw, plan->w, dw);
  if (dx == nullptr) return;
  memory mdy_data = plan->bwd_data.diff_dst_desc() == mdy.get_desc()
                        ? mdy
                        : in_layout(plan->bwd_data.diff_dst_desc(), plan->y, dy, true);
  memory mw = in_layout(plan->bwd_data.weights_desc(), plan->w, w, true);
  memory mdx = in_layout(plan->bwd_data.diff_src_desc(), plan->x, dx, false);
  run(plan->bwd_data_prim, plan->bwd_data.scratchpad_desc(),
      {{DNNL_ARG_DIFF_DST, mdy_data}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DIFF_SRC, mdx}});
  out_of_layout(mdx, plan->x, dx);
}

}  // namespace weft::onednn
