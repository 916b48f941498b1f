// Tensor: a strided view of a reference-counted storage block of float32 or float64.
// Views (reshape of a contiguous tensor, transpose, permute, slice, select, expand,
// unsqueeze) share storage; clone() and contiguous() copy. Row-major by default.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "weft/tensor/dtype.h"
#include "weft/util/error.h"

namespace weft {

using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);
std::string shape_to_string(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
// The shape both operands broadcast to (NumPy rules); throws InternalError if they cannot.
Shape broadcast_shapes(const Shape& a, const Shape& b);

class Storage {
 public:
  explicit Storage(std::size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_;
  std::size_t bytes_;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor

  static Tensor empty(const Shape& shape, DType dtype = DType::F32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32);
  static Tensor ones(const Shape& shape, DType dtype = DType::F32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32);
  static Tensor scalar(double value, DType dtype = DType::F32);
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape);
  static Tensor arange(std::int64_t n, DType dtype = DType::F32);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape_.size()); }
  std::int64_t size(std::int64_t d) const { return shape_[wrap_dim(d)]; }
  std::int64_t stride(std::int64_t d) const { return strides_[wrap_dim(d)]; }
  std::int64_t numel() const { return shape_numel(shape_); }
  std::int64_t offset() const { return offset_; }
  bool is_contiguous() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }

  // Pointer to the first element; T must match dtype().
  template <class T>
  T* data() const {
    WEFT_CHECK(dtype_of<T>() == dtype_, "tensor dtype mismatch");
    return static_cast<T*>(storage_->data()) + offset_;
  }
  void* raw_data() const {
    return static_cast<char*>(storage_->data()) + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
  }

  // Views. A negative dim counts from the end.
  Tensor view(Shape shape) const;     // contiguous only; one dim may be -1
  Tensor reshape(Shape shape) const;  // a view when possible, else a copy
  Tensor flatten(std::int64_t start_dim = 0) const;
  Tensor transpose(std::int64_t d0, std::int64_t d1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(const std::vector<std::int64_t>& order) const;
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end) const;
  Tensor select(std::int64_t dim, std::int64_t index) const;
  Tensor expand(const Shape& shape) const;  // broadcast view (stride 0)
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor squeeze(std::int64_t dim) const;

  Tensor contiguous() const;  // itself if already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  Tensor to(DType dtype) const;

  // In place.
  void copy_(const Tensor& src);  // src broadcasts to this shape; dtypes may differ
  void fill_(double value);
  void zero_() { fill_(0.0); }

  double item() const;  // a one-element tensor's value
  double at(std::initializer_list<std::int64_t> index) const;
  void set(std::initializer_list<std::int64_t> index, double value);
  std::vector<double> to_vector() const;  // all elements in row-major order
  std::vector<float> to_float_vector() const;

  bool shares_storage(const Tensor& other) const { return storage_ == other.storage_; }
  // The storage block, for caches that must not outlive it (hold it weakly).
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::int64_t wrap_dim(std::int64_t d) const;
  std::int64_t wrap_dim_for_insert(std::int64_t d) const;  // range [0, dim()]

 private:
  std::shared_ptr<Storage> storage_;
  std::int64_t offset_ = 0;  // in elements
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::F32;
  std::int64_t linear_offset(std::initializer_list<std::int64_t> index) const;
};

}  // namespace weft
