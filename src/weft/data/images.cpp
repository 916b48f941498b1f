#include "weft/data/images.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "weft/data/idx.h"
#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/parse.h"

namespace weft {

namespace {

constexpr std::int64_t kMaxLabel = std::int64_t{1} << 24;

std::string first_existing(const std::string& dir, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (file_exists(dir + "/" + n)) return dir + "/" + n;
  return "";
}

// [n, h, w, c] values (channels last, as the files store them; value(i) reads element i)
// into [n, c, h, w] floats of value / 255.
Tensor images_from(std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c,
                   const std::function<double(std::int64_t)>& value) {
  Tensor t = Tensor::empty({n, c, h, w}, DType::F32);
  float* p = t.data<float>();
  const std::int64_t plane = h * w;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t px = 0; px < plane; ++px)
      for (std::int64_t ch = 0; ch < c; ++ch)
        p[(i * c + ch) * plane + px] = static_cast<float>(value((i * plane + px) * c + ch) / 255.0);
  return t;
}

std::vector<std::int32_t> labels_from(std::int64_t n, const std::function<double(std::int64_t)>& value,
                                      const std::string& path) {
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = value(i);
    if (!(v >= 0 && v < static_cast<double>(kMaxLabel) && v == std::floor(v)))
      throw DataError(path + ": label " + std::to_string(v) + " at index " + std::to_string(i) +
                      " is not a whole number in 0.." + std::to_string(kMaxLabel - 1));
    labels[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(v);
  }
  return labels;
}

// Images [N, H, W] or [N, H, W, C] and labels [N], checked against each other.
struct Shape4 {
  std::int64_t n, h, w, c;
};
Shape4 image_shape(const std::vector<std::int64_t>& dims, std::int64_t labels, const std::string& images,
                   const std::string& label_file) {
  if (dims.size() != 3 && dims.size() != 4)
    throw DataError(images + ": images must be [N, H, W] or [N, H, W, C], got " + std::to_string(dims.size()) +
                    " dimension(s)");
  Shape4 s{dims[0], dims[1], dims[2], dims.size() == 4 ? dims[3] : 1};
  if (s.h < 1 || s.w < 1 || s.c < 1) throw DataError(images + ": an image dimension is 0");
  if (s.n != labels)
    throw DataError(images + " has " + std::to_string(s.n) + " images but " + label_file + " has " +
                    std::to_string(labels) + " labels");
  return s;
}

ImageSplit from_idx(const std::string& dir, const std::string& split, std::int64_t limit) {
  const std::string stem = split == "train" ? "train" : "t10k";
  const std::string images = first_existing(dir, {stem + "-images-idx3-ubyte", stem + "-images-idx3-ubyte.gz"});
  const std::string labels = first_existing(dir, {stem + "-labels-idx1-ubyte", stem + "-labels-idx1-ubyte.gz"});
  if (images.empty() || labels.empty())
    throw DataError("data directory " + dir + " has no " + stem + "-images-idx3-ubyte or " + stem +
                    "-labels-idx1-ubyte (or .gz)");
  const IdxArray x = read_idx(images, limit), y = read_idx(labels, limit);
  if (y.dims.size() != 1) throw DataError(labels + ": labels must be [N]");
  Shape4 s = image_shape(x.dims, y.dims[0], images, labels);
  if (limit > 0 && limit < s.n) s.n = limit;
  return {images_from(s.n, s.h, s.w, s.c, [&](std::int64_t i) { return x.value(i); }),
          labels_from(s.n, [&](std::int64_t i) { return y.value(i); }, labels), images};
}

// NumPy's .npy: magic, version, header length, a Python dict literal, then the data.
struct Npy {
  CountedBytes counted;  // the file's bytes, under the allocator's ceiling (allocator.h)
  std::string bytes;
  std::size_t data = 0;  // where the elements start
  char kind = 'f';       // f, i, u
  std::size_t item = 4;
  std::vector<std::int64_t> shape;
  std::int64_t count = 1;
  double value(std::int64_t i) const {
    const char* p = bytes.data() + data + static_cast<std::size_t>(i) * item;
    auto as = [p](auto v) {
      std::memcpy(&v, p, sizeof v);
      return static_cast<double>(v);
    };
    if (kind == 'f') return item == 4 ? as(float{}) : as(double{});
    if (kind == 'u') return item == 1 ? as(std::uint8_t{}) : item == 2 ? as(std::uint16_t{}) : item == 4 ? as(std::uint32_t{}) : as(std::uint64_t{});
    return item == 1 ? as(std::int8_t{}) : item == 2 ? as(std::int16_t{}) : item == 4 ? as(std::int32_t{}) : as(std::int64_t{});
  }
};

Npy read_npy(const std::string& path) {
  Npy a;
  a.counted = counted_file_bytes(path);
  a.bytes = read_file(path);
  const std::string& b = a.bytes;
  auto fail = [&](const std::string& why) { return DataError(path + ": " + why); };
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) throw fail("not a NumPy .npy file (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(b[6]);
  std::size_t header_len = 0, at = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(b[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(b[9])) << 8);
    at = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) throw fail("truncated header");
    for (int i = 0; i < 4; ++i) header_len |= static_cast<std::size_t>(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    at = 12;
  } else {
    throw fail("unsupported .npy version " + std::to_string(major));
  }
  if (header_len > b.size() - at) throw fail("header length exceeds the file");
  const std::string header = b.substr(at, header_len);
  a.data = at + header_len;
  auto field = [&](const std::string& key) {
    const std::size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) throw fail("header has no '" + key + "'");
    const std::size_t colon = header.find(':', k);
    if (colon == std::string::npos) throw fail("malformed header");
    return colon + 1;
  };
  // 'descr': '<f4' (little-endian or not applicable; C order only).
  std::size_t d = header.find('\'', field("descr"));
  const std::size_t d_end = d == std::string::npos ? d : header.find('\'', d + 1);
  if (d_end == std::string::npos) throw fail("malformed descr");
  const std::string descr = header.substr(d + 1, d_end - d - 1);
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|' && descr[0] != '=') ||
      std::string("fiu").find(descr[1]) == std::string::npos)
    throw fail("dtype '" + descr + "' is not a little-endian integer or float");
  a.kind = descr[1];
  const auto item = parse_integer(descr.substr(2));
  if (!item || !(*item == 1 || *item == 2 || *item == 4 || *item == 8) || (a.kind == 'f' && *item < 4))
    throw fail("dtype '" + descr + "' is not supported (u1-u8, i1-i8, f4, f8)");
  a.item = static_cast<std::size_t>(*item);
  if (header.find("True", field("fortran_order")) == header.find_first_not_of(' ', field("fortran_order")))
    throw fail("Fortran-order arrays are not supported (save with C order)");
  const std::size_t open = header.find('(', field("shape")), close = header.find(')', open);
  if (open == std::string::npos || close == std::string::npos) throw fail("malformed shape");
  std::size_t p = open + 1;
  while (p < close) {
    const std::size_t comma = std::min(header.find(',', p), close);
    std::string dim = header.substr(p, comma - p);
    dim.erase(0, dim.find_first_not_of(' '));
    dim.erase(dim.find_last_not_of(' ') + 1);
    if (!dim.empty()) {
      const auto v = parse_integer(dim);
      if (!v || *v < 0 || *v > (std::int64_t{1} << 40)) throw fail("shape holds '" + dim + "'");
      a.shape.push_back(*v);
      if (*v > 0 && a.count > (std::numeric_limits<std::int64_t>::max() / 8) / *v) throw fail("the shape is too large");
      a.count *= *v;
    }
    p = comma + 1;
  }
  if (static_cast<std::uint64_t>(a.count) * a.item != b.size() - a.data)
    throw fail("shape " + std::to_string(a.count) + " elements of " + std::to_string(a.item) + " bytes, but the file holds " +
               std::to_string(b.size() - a.data) + " bytes of data");
  return a;
}

ImageSplit from_npy(const std::string& dir, const std::string& split, std::int64_t limit) {
  const std::string images = dir + "/" + split + "-images.npy", labels = dir + "/" + split + "-labels.npy";
  if (!file_exists(images) || !file_exists(labels))
    throw DataError("data directory " + dir + " has no " + split + "-images.npy or " + split + "-labels.npy");
  const Npy x = read_npy(images), y = read_npy(labels);
  if (y.shape.size() != 1 || y.kind == 'f') throw DataError(labels + ": labels must be [N] integers");
  Shape4 s = image_shape(x.shape, y.shape[0], images, labels);
  if (limit > 0 && limit < s.n) s.n = limit;
  return {images_from(s.n, s.h, s.w, s.c, [&](std::int64_t i) { return x.value(i); }),
          labels_from(s.n, [&](std::int64_t i) { return y.value(i); }, labels), images};
}

ImageSplit from_csv(const std::string& dir, const std::string& split, std::int64_t limit) {
  const std::string path = dir + "/" + split + ".csv";
  if (!file_exists(path)) throw DataError("data directory " + dir + " has no " + split + ".csv");
  const CountedBytes counted = counted_file_bytes(path);  // (under the allocator's ceiling)
  const std::string text = read_file(path);
  std::vector<double> values, labels;
  CountedBytes values_held;  // the values' block, counted as it grows (beside the old while it moves)
  std::int64_t per_row = -1, line_no = 0, first_row_line = 0;
  std::size_t at = 0;
  while (at < text.size() && (limit <= 0 || static_cast<std::int64_t>(labels.size()) < limit)) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    std::vector<double> row;
    std::size_t p = 0;
    bool header = false;
    while (p <= line.size()) {
      const std::size_t comma = std::min(line.find(',', p), line.size());
      std::string_view cell = line.substr(p, comma - p);
      while (!cell.empty() && cell.front() == ' ') cell.remove_prefix(1);
      while (!cell.empty() && cell.back() == ' ') cell.remove_suffix(1);
      const auto v = parse_number(cell);
      if (!v) {
        if (line_no == 1) {
          header = true;
          break;
        }
        throw DataError(path + ": line " + std::to_string(line_no) + ": '" + std::string(cell.substr(0, 32)) +
                        "' is not a number");
      }
      row.push_back(*v);
      p = comma + 1;
    }
    if (header) continue;
    if (row.size() < 2) throw DataError(path + ": line " + std::to_string(line_no) + " holds no pixels");
    const auto d = static_cast<std::int64_t>(row.size()) - 1;
    if (per_row >= 0 && d != per_row)
      throw DataError(path + ": line " + std::to_string(line_no) + " holds " + std::to_string(d) + " pixels, line " +
                      std::to_string(first_row_line) + " " + std::to_string(per_row));
    if (per_row < 0) first_row_line = line_no;
    per_row = d;
    labels.push_back(row[0]);
    if (values.size() + static_cast<std::size_t>(d) > values.capacity()) {
      const std::size_t next = std::max(values.capacity() * 2, values.size() + static_cast<std::size_t>(d));
      CountedBytes grown(next * sizeof(double));
      values.reserve(next);
      values_held = std::move(grown);
    }
    values.insert(values.end(), row.begin() + 1, row.end());
  }
  if (labels.empty()) throw DataError(path + ": no rows");
  const auto square = [](std::int64_t v) {
    const auto s = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(v))));
    return s * s == v ? s : 0;
  };
  std::int64_t c = 1, side = square(per_row);
  if (side == 0 && per_row % 3 == 0 && square(per_row / 3) > 0) {
    c = 3;
    side = square(per_row / 3);
  }
  if (side == 0)
    throw DataError(path + ": " + std::to_string(per_row) + " pixels per row are neither H x H (one channel) nor 3 x H x H (RGB)");
  const auto n = static_cast<std::int64_t>(labels.size());
  return {images_from(n, side, side, c, [&](std::int64_t i) { return values[static_cast<std::size_t>(i)]; }),
          labels_from(n, [&](std::int64_t i) { return labels[static_cast<std::size_t>(i)]; }, path), path};
}

}  // namespace

ImageSplit read_image_split(const std::string& dir, const std::string& split, std::int64_t limit) {
  if (split != "train" && split != "test") throw ConfigError("unknown split '" + split + "'");
  if (!is_directory(dir)) {
    if (file_exists(dir))
      throw DataError("--data " + dir + " is a file: image data is a folder holding train and test files "
                      "(IDX, NPY or CSV: docs/training.md)");
    throw DataError("data directory " + dir + " does not exist (install the Debian package dataset-fashion-mnist, "
                    "or pass --data-dir)");
  }
  if (!first_existing(dir, {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz"}).empty()) return from_idx(dir, split, limit);
  if (file_exists(dir + "/train-images.npy")) return from_npy(dir, split, limit);
  if (file_exists(dir + "/train.csv")) return from_csv(dir, split, limit);
  throw DataError("data directory " + dir + " holds no image data: train-images-idx3-ubyte[.gz] (IDX), "
                  "train-images.npy (NPY) or train.csv (CSV)");
}

Normalization channel_statistics(const Tensor& images) {
  const std::int64_t n = images.shape()[0], c = images.shape()[1], plane = images.shape()[2] * images.shape()[3];
  const float* p = images.data<float>();
  Normalization s;
  for (std::int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < plane; ++k) {
        const double v = p[(i * c + ch) * plane + k];
        sum += v;
        sq += v * v;
      }
    const double count = static_cast<double>(n * plane), mean = count > 0 ? sum / count : 0.0;
    const double var = count > 0 ? std::max(0.0, sq / count - mean * mean) : 0.0;
    s.mean.push_back(mean);
    s.stddev.push_back(var > 1e-24 ? std::sqrt(var) : 1.0);
  }
  return s;
}

void normalize_images(Tensor& images, const Normalization& norm) {
  const std::int64_t n = images.shape()[0], c = images.shape()[1], plane = images.shape()[2] * images.shape()[3];
  WEFT_CHECK(norm.mean.size() == 1 || static_cast<std::int64_t>(norm.mean.size()) == c, "one mean per channel");
  float* p = images.data<float>();
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t ch = 0; ch < c; ++ch) {
      const std::size_t k = norm.mean.size() == 1 ? 0 : static_cast<std::size_t>(ch);
      // x * (1 / std) - mean / std, in float.
      const auto scale = static_cast<float>(1.0 / norm.stddev[k]), shift = static_cast<float>(norm.mean[k] / norm.stddev[k]);
      float* q = p + (i * c + ch) * plane;
      for (std::int64_t j = 0; j < plane; ++j) q[j] = q[j] * scale - shift;
    }
}

}  // namespace weft
