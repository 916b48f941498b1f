#include "weft/comm/reduce.h"

#include <algorithm>
#include <type_traits>

#include "weft/util/dispatch.h"
#include "weft/util/error.h"
#include "weft/util/half_float.h"

namespace weft::comm {

std::size_t element_size(DataType t) {
  switch (t) {
    case DataType::kF32: case DataType::kI32: return 4;
    case DataType::kF64: case DataType::kI64: return 8;
    case DataType::kF16: case DataType::kBF16: return 2;
    case DataType::kI8: case DataType::kU8: return 1;
  }
  return 4;
}

const char* dtype_name(DataType t) {
  switch (t) {
    case DataType::kF32: return "f32";
    case DataType::kF64: return "f64";
    case DataType::kI32: return "i32";
    case DataType::kI64: return "i64";
    case DataType::kF16: return "f16";
    case DataType::kBF16: return "bf16";
    case DataType::kI8: return "i8";
    case DataType::kU8: return "u8";
  }
  return "?";
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProd: return "prod";
  }
  return "?";
}

DataType parse_dtype(const std::string& s) {
  for (DataType t : {DataType::kF32, DataType::kF64, DataType::kI32, DataType::kI64, DataType::kF16, DataType::kBF16,
                     DataType::kI8, DataType::kU8})
    if (s == dtype_name(t)) return t;
  throw ConfigError("unknown data type '" + s + "' (known: f32, f64, i32, i64, f16, bf16, i8, u8)");
}

ReduceOp parse_op(const std::string& s) {
  for (ReduceOp o : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd})
    if (s == op_name(o)) return o;
  throw ConfigError("unknown reduction '" + s + "' (known: sum, avg, max, min, prod)");
}

namespace {
// Integers add and multiply as unsigned: they wrap around on overflow, as two's complement
// hardware does, instead of being undefined.
template <class T, bool = std::is_integral_v<T>>
struct Arith {
  using type = T;
};
template <class T>
struct Arith<T, true> {
  using type = std::make_unsigned_t<T>;
};

// The loops, over restrict pointers so that they vectorize; f combines two elements.
template <class T, class F>
void combine_into(T* __restrict d, const T* __restrict s, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i) d[i] = f(d[i], s[i]);
}
template <class T, class F>
void combine_from(T* __restrict d, const T* __restrict a, const T* __restrict b, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
}

// Calls loop(f) with the element function of `op`.
template <class T, class Loop>
void with_op(ReduceOp op, Loop loop) {
  using A = typename Arith<T>::type;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: loop([](T x, T y) { return static_cast<T>(static_cast<A>(x) + static_cast<A>(y)); }); break;
    case ReduceOp::kProd: loop([](T x, T y) { return static_cast<T>(static_cast<A>(x) * static_cast<A>(y)); }); break;
    case ReduceOp::kMax: loop([](T x, T y) { return std::max(x, y); }); break;
    case ReduceOp::kMin: loop([](T x, T y) { return std::min(x, y); }); break;
  }
}

// A 16-bit float element: combines and divides as float32, rounded back once.
template <std::uint16_t (*Narrow)(float), float (*Widen)(std::uint16_t)>
struct Half {
  std::uint16_t bits;
  Half() = default;
  explicit Half(float f) : bits(Narrow(f)) {}
  explicit operator float() const { return Widen(bits); }
  friend Half operator+(Half a, Half b) { return Half(float(a) + float(b)); }
  friend Half operator*(Half a, Half b) { return Half(float(a) * float(b)); }
  friend Half operator/(Half a, Half b) { return Half(float(a) / float(b)); }
  friend bool operator<(Half a, Half b) { return float(a) < float(b); }
};
using F16 = Half<f16_from_float, float_from_f16>;
using BF16 = Half<bf16_from_float, float_from_bf16>;

// Calls f(T{}) with the element type of `t`.
template <class F>
void with_type(DataType t, F f) {
  switch (t) {
    case DataType::kF32: f(float{}); break;
    case DataType::kF64: f(double{}); break;
    case DataType::kI32: f(std::int32_t{}); break;
    case DataType::kI64: f(std::int64_t{}); break;
    case DataType::kF16: f(F16{}); break;
    case DataType::kBF16: f(BF16{}); break;
    case DataType::kI8: f(std::int8_t{}); break;
    case DataType::kU8: f(std::uint8_t{}); break;
  }
}

template <class T>
void divide(T* d, std::size_t n, int by) {
  const T divisor(static_cast<float>(by));  // exact: worlds stay far below 2^24
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] / divisor);
}
// float16 sums (and averages' sums): widened and narrowed a block at a time with the
// vector conversions, one rounding per combine as Half does.
constexpr std::size_t kBlock = 512;
void add_f16(std::uint16_t* d, const std::uint16_t* a, const std::uint16_t* b, std::size_t count) {
  float x[kBlock], y[kBlock];
  for (std::size_t at = 0; at < count; at += kBlock) {
    const std::size_t n = std::min(kBlock, count - at);
    floats_from_f16(a + at, x, n);
    floats_from_f16(b + at, y, n);
    for (std::size_t i = 0; i < n; ++i) x[i] += y[i];
    f16_from_floats(x, d + at, n);
  }
}

}  // namespace

void reduce_into(DataType t, ReduceOp op, void* dst, const void* src, std::size_t count) {
  if (t == DataType::kF16 && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
    dispatched([&] {
      add_f16(static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(dst),
              static_cast<const std::uint16_t*>(src), count);
    });
    return;
  }
  with_type(t, [&](auto tag) {
    using T = decltype(tag);
    with_op<T>(op, [&](auto f) {
      dispatched([&] { combine_into(static_cast<T*>(dst), static_cast<const T*>(src), count, f); });
    });
  });
}

void reduce_from(DataType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count) {
  if (t == DataType::kF16 && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
    dispatched([&] {
      add_f16(static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(a), static_cast<const std::uint16_t*>(b),
              count);
    });
    return;
  }
  with_type(t, [&](auto tag) {
    using T = decltype(tag);
    with_op<T>(op, [&](auto f) {
      dispatched([&] { combine_from(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), count, f); });
    });
  });
}

void scale_for_average(DataType t, void* data, std::size_t count, int by) {
  with_type(t, [&](auto tag) { dispatched([&] { divide(static_cast<decltype(tag)*>(data), count, by); }); });
}

}  // namespace weft::comm
