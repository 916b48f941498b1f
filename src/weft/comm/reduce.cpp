#include "weft/comm/reduce.h"

#include <algorithm>
#include <type_traits>

#include "weft/util/error.h"

namespace weft::comm {

std::size_t element_size(DataType t) {
  switch (t) {
    case DataType::kF32: case DataType::kI32: return 4;
    case DataType::kF64: case DataType::kI64: return 8;
  }
  return 4;
}

const char* dtype_name(DataType t) {
  switch (t) {
    case DataType::kF32: return "f32";
    case DataType::kF64: return "f64";
    case DataType::kI32: return "i32";
    case DataType::kI64: return "i64";
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
  for (DataType t : {DataType::kF32, DataType::kF64, DataType::kI32, DataType::kI64})
    if (s == dtype_name(t)) return t;
  throw ConfigError("unknown data type '" + s + "' (known: f32, f64, i32, i64)");
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

template <class T>
void combine(ReduceOp op, T* __restrict d, const T* __restrict s, std::size_t n) {
  using A = typename Arith<T>::type;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<T>(static_cast<A>(d[i]) + static_cast<A>(s[i]));
      break;
    case ReduceOp::kProd:
      for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<T>(static_cast<A>(d[i]) * static_cast<A>(s[i]));
      break;
    case ReduceOp::kMax:
      for (std::size_t i = 0; i < n; ++i) d[i] = std::max(d[i], s[i]);
      break;
    case ReduceOp::kMin:
      for (std::size_t i = 0; i < n; ++i) d[i] = std::min(d[i], s[i]);
      break;
  }
}
template <class T>
void divide(T* d, std::size_t n, int by) {
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] / static_cast<T>(by));
}
}  // namespace

void reduce_into(DataType t, ReduceOp op, void* dst, const void* src, std::size_t count) {
  switch (t) {
    case DataType::kF32: combine(op, static_cast<float*>(dst), static_cast<const float*>(src), count); break;
    case DataType::kF64: combine(op, static_cast<double*>(dst), static_cast<const double*>(src), count); break;
    case DataType::kI32:
      combine(op, static_cast<std::int32_t*>(dst), static_cast<const std::int32_t*>(src), count);
      break;
    case DataType::kI64:
      combine(op, static_cast<std::int64_t*>(dst), static_cast<const std::int64_t*>(src), count);
      break;
  }
}

void scale_for_average(DataType t, void* data, std::size_t count, int by) {
  switch (t) {
    case DataType::kF32: divide(static_cast<float*>(data), count, by); break;
    case DataType::kF64: divide(static_cast<double*>(data), count, by); break;
    case DataType::kI32: divide(static_cast<std::int32_t*>(data), count, by); break;
    case DataType::kI64: divide(static_cast<std::int64_t*>(data), count, by); break;
  }
}

}  // namespace weft::comm
