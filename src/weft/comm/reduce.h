// Element types and reduction operators of the communicator, and the kernel that combines
// a received piece into a destination.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace weft::comm {

// kF16 (IEEE binary16) and kBF16 (bfloat16) reduce in float32, one rounding per combine;
// kI8 and kU8 (bytes: PyTorch's int8, uint8 and bool tensors) wrap around as the wider
// integers do.
enum class DataType : std::uint8_t { kF32, kF64, kI32, kI64, kF16, kBF16, kI8, kU8 };
enum class ReduceOp : std::uint8_t { kSum, kAvg, kMax, kMin, kProd };

std::size_t element_size(DataType t);
const char* dtype_name(DataType t);
const char* op_name(ReduceOp op);
DataType parse_dtype(const std::string& s);  // f32 f64 i32 i64 f16 bf16 i8 u8; throws ConfigError
ReduceOp parse_op(const std::string& s);     // sum avg max min prod; throws ConfigError

// dst[i] = dst[i] (op) src[i] for i < count. kAvg combines as a sum.
void reduce_into(DataType t, ReduceOp op, void* dst, const void* src, std::size_t count);
// dst[i] = a[i] (op) b[i] (three distinct buffers): the same bits as copying a to dst and
// reducing b into it.
void reduce_from(DataType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count);
// Divides by `by` (for kAvg after the sum); integers divide and truncate.
void scale_for_average(DataType t, void* data, std::size_t count, int by);

}  // namespace weft::comm
