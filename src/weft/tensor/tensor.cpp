#include "weft/tensor/tensor.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "weft/tensor/allocator.h"
#include "weft/tensor/ops.h"

namespace weft {

void throw_bf16_compute() {
  throw InternalError("bf16 tensors are storage only: convert to f32 before computing");
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto s : shape)
    if (__builtin_mul_overflow(n, s, &n)) throw ConfigError("a tensor of shape " + shape_to_string(shape) + " is too large");
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    if (i > 0) s *= shape[i];  // the whole product is never needed (and may not fit)
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    WEFT_CHECK(da == db || da == 1 || db == 1,
               "shapes " + shape_to_string(a) + " and " + shape_to_string(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Storage::Storage(std::size_t bytes) : data_(allocate_bytes(bytes)), bytes_(bytes) {}
Storage::~Storage() { free_bytes(data_, bytes_); }

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  for (auto s : shape) WEFT_CHECK(s >= 0, "negative dimension in " + shape_to_string(shape));
  const std::int64_t elements = shape_numel(shape);  // checked: the strides below stay in range
  if (static_cast<std::uint64_t>(elements) > (std::uint64_t{1} << 60) / dtype_size(dtype))
    throw ConfigError("a tensor of shape " + shape_to_string(shape) + " is too large");
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(static_cast<std::size_t>(elements) * dtype_size(dtype));
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill_(value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
  WEFT_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape),
             "from_vector: " + std::to_string(values.size()) + " values for shape " + shape_to_string(shape));
  Tensor t = empty(shape, DType::F32);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape) {
  WEFT_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape),
             "from_vector: " + std::to_string(values.size()) + " values for shape " + shape_to_string(shape));
  Tensor t = empty(shape, DType::F64);
  std::copy(values.begin(), values.end(), t.data<double>());
  return t;
}

Tensor Tensor::arange(std::int64_t n, DType dtype) {
  Tensor t = empty({n}, dtype);
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(i);
  });
  return t;
}

std::int64_t Tensor::wrap_dim(std::int64_t d) const {
  std::int64_t n = dim();
  if (d < 0) d += n;
  WEFT_CHECK(d >= 0 && d < n, "dimension out of range for shape " + shape_to_string(shape_));
  return d;
}

std::int64_t Tensor::wrap_dim_for_insert(std::int64_t d) const {
  std::int64_t n = dim() + 1;
  if (d < 0) d += n;
  WEFT_CHECK(d >= 0 && d < n, "dimension out of range for shape " + shape_to_string(shape_));
  return d;
}

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

Tensor Tensor::view(Shape shape) const {
  WEFT_CHECK(is_contiguous(), "view of a non-contiguous tensor; use reshape");
  std::int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      WEFT_CHECK(infer < 0, "view: more than one -1");
      infer = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    WEFT_CHECK(known > 0 && numel() % known == 0, "view: cannot infer -1 for " + shape_to_string(shape));
    shape[infer] = numel() / known;
  }
  WEFT_CHECK(shape_numel(shape) == numel(),
             "view: " + shape_to_string(shape_) + " has " + std::to_string(numel()) +
                 " elements, not " + std::to_string(shape_numel(shape)));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  if (is_contiguous()) return view(std::move(shape));
  return contiguous().view(std::move(shape));
}

Tensor Tensor::flatten(std::int64_t start_dim) const {
  start_dim = wrap_dim(start_dim);
  Shape s(shape_.begin(), shape_.begin() + start_dim);
  s.push_back(-1);
  if (numel() == 0) {
    std::int64_t rest = 1;
    for (auto i = start_dim; i < dim(); ++i) rest *= shape_[i];
    s.back() = rest;
  }
  return reshape(s);
}

Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const {
  d0 = wrap_dim(d0);
  d1 = wrap_dim(d1);
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Tensor Tensor::permute(const std::vector<std::int64_t>& order) const {
  WEFT_CHECK(static_cast<std::int64_t>(order.size()) == dim(), "permute: wrong number of dims");
  std::vector<bool> seen(order.size(), false);
  Tensor t = *this;
  for (size_t i = 0; i < order.size(); ++i) {
    std::int64_t d = wrap_dim(order[i]);
    WEFT_CHECK(!seen[d], "permute: repeated dim");
    seen[d] = true;
    t.shape_[i] = shape_[d];
    t.strides_[i] = strides_[d];
  }
  return t;
}

Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end) const {
  d = wrap_dim(d);
  std::int64_t n = shape_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<std::int64_t>(start, 0, n);
  end = std::clamp<std::int64_t>(end, start, n);
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  d = wrap_dim(d);
  if (index < 0) index += shape_[d];
  WEFT_CHECK(index >= 0 && index < shape_[d], "select: index out of range");
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::expand(const Shape& shape) const {
  WEFT_CHECK(shape.size() >= shape_.size(), "expand: cannot drop dims");
  size_t lead = shape.size() - shape_.size();
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_.assign(shape.size(), 0);
  for (size_t i = 0; i < shape_.size(); ++i) {
    std::int64_t have = shape_[i], want = shape[lead + i];
    if (have == want) {
      t.strides_[lead + i] = strides_[i];
    } else {
      WEFT_CHECK(have == 1, "expand: " + shape_to_string(shape_) + " to " + shape_to_string(shape));
    }
  }
  return t;
}

Tensor Tensor::unsqueeze(std::int64_t d) const {
  d = wrap_dim_for_insert(d);
  Tensor t = *this;
  std::int64_t stride = d < dim() ? shape_[d] * strides_[d] : 1;
  t.shape_.insert(t.shape_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, stride);
  return t;
}

Tensor Tensor::squeeze(std::int64_t d) const {
  d = wrap_dim(d);
  WEFT_CHECK(shape_[d] == 1, "squeeze: dim is not 1");
  Tensor t = *this;
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_);
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor t = empty(shape_, dtype);
  t.copy_(*this);
  return t;
}

void Tensor::copy_(const Tensor& src) { ops::copy_into(*this, src); }

void Tensor::fill_(double value) { ops::fill(*this, value); }

std::int64_t Tensor::linear_offset(std::initializer_list<std::int64_t> index) const {
  WEFT_CHECK(static_cast<std::int64_t>(index.size()) == dim(), "index has wrong rank");
  std::int64_t off = offset_;
  size_t i = 0;
  for (auto v : index) {
    WEFT_CHECK(v >= 0 && v < shape_[i], "index out of range");
    off += v * strides_[i];
    ++i;
  }
  return off;
}

double Tensor::item() const {
  WEFT_CHECK(numel() == 1, "item() of a tensor with " + std::to_string(numel()) + " elements");
  return dispatch(dtype_, [&](auto zero) -> double {
    using T = decltype(zero);
    return static_cast<double>(*data<T>());
  });
}

double Tensor::at(std::initializer_list<std::int64_t> index) const {
  std::int64_t off = linear_offset(index);
  return dispatch(dtype_, [&](auto zero) -> double {
    using T = decltype(zero);
    return static_cast<double>(static_cast<T*>(storage_->data())[off]);
  });
}

void Tensor::set(std::initializer_list<std::int64_t> index, double value) {
  std::int64_t off = linear_offset(index);
  dispatch(dtype_, [&](auto zero) {
    using T = decltype(zero);
    static_cast<T*>(storage_->data())[off] = static_cast<T>(value);
  });
}

std::vector<double> Tensor::to_vector() const {
  Tensor c = to(DType::F64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

std::vector<float> Tensor::to_float_vector() const {
  Tensor c = to(DType::F32).contiguous();
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.numel());
}

}  // namespace weft
