#include "weft/data/idx.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft {

namespace {

constexpr std::int64_t kMaxBytes = std::int64_t{1} << 36;  // 64 GiB: anything larger is corrupt

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// Reads up to n bytes; returns how many were read. Throws on a corrupt stream.
std::size_t read_some(gzFile f, std::uint8_t* dst, std::size_t n, const std::string& path) {
  std::size_t total = 0;
  while (total < n) {
    unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - total, 1u << 30));
    int got = gzread(f, dst + total, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      throw DataError(path + ": corrupt compressed data (" + std::string(msg ? msg : "zlib error") + ")");
    }
    if (got == 0) break;
    total += static_cast<std::size_t>(got);
  }
  return total;
}

}  // namespace

std::size_t idx_type_size(std::uint8_t type) {
  switch (type) {
    case 0x08: case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C: case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 0;
  }
}

std::int64_t IdxArray::count() const {
  std::int64_t n = dims.empty() ? 0 : items >= 0 ? items : dims[0];
  for (std::size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

double IdxArray::value(std::int64_t i) const {
  const std::uint8_t* p = data.data() + i * static_cast<std::int64_t>(idx_type_size(type));
  switch (type) {
    case 0x08: return p[0];
    case 0x09: return static_cast<std::int8_t>(p[0]);
    case 0x0B: return static_cast<std::int16_t>((p[0] << 8) | p[1]);
    case 0x0C: return static_cast<std::int32_t>(be32(p));
    case 0x0D: {
      std::uint32_t u = be32(p);
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case 0x0E: {
      std::uint64_t u = (std::uint64_t{be32(p)} << 32) | be32(p + 4);
      double d;
      std::memcpy(&d, &u, 8);
      return d;
    }
    default: return 0.0;
  }
}

IdxArray read_idx(const std::string& path, std::int64_t first) {
  if (!file_exists(path)) throw DataError(path + ": no such file");
  if (is_directory(path)) throw DataError(path + ": is a directory, expected an IDX file");
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (!f) throw DataError(path + ": cannot open: " + std::strerror(errno));
  // zlib's buffers: 64 KiB in (and twice that out). 1 MiB ones were faulted in page by page
  // at every start: a small run (1,280 images) spent 10% more processor time, the whole
  // training set loaded no faster.
  gzbuffer(f.get(), 1 << 16);

  std::uint8_t head[4];
  if (read_some(f.get(), head, 4, path) != 4) throw DataError(path + ": truncated: shorter than the 4-byte IDX header");
  std::uint32_t magic = be32(head);
  if (head[0] != 0 || head[1] != 0) {
    throw DataError(path + ": not an IDX file (magic " + hex32(magic) + ", expected 0x0000 then type and rank)");
  }
  IdxArray a;
  a.type = head[2];
  std::size_t esize = idx_type_size(a.type);
  if (esize == 0) throw DataError(path + ": unknown IDX element type " + hex32(a.type) + " (magic " + hex32(magic) + ")");
  int rank = head[3];
  if (rank < 1 || rank > 8) throw DataError(path + ": IDX rank " + std::to_string(rank) + " out of range 1..8");

  std::vector<std::uint8_t> dimbytes(static_cast<size_t>(rank) * 4);
  if (read_some(f.get(), dimbytes.data(), dimbytes.size(), path) != dimbytes.size()) {
    throw DataError(path + ": truncated in the dimension sizes");
  }
  std::int64_t bytes = static_cast<std::int64_t>(esize);
  for (int i = 0; i < rank; ++i) {
    std::int64_t d = be32(&dimbytes[static_cast<size_t>(i) * 4]);
    if (d == 0 || d > kMaxBytes) throw DataError(path + ": dimension " + std::to_string(i) + " has size " + std::to_string(d));
    a.dims.push_back(d);
    if (bytes > kMaxBytes / d) throw DataError(path + ": dimensions give an implausible size (corrupt header)");
    bytes *= d;
  }
  // A header is not believed before the data are there: an uncompressed file is checked
  // against its size, and the data are read in steps of at most 64 MiB, so a header that
  // promises gigabytes in a file of a few bytes allocates one step at most.
  const auto truncated = [&](std::int64_t got) {
    return DataError(path + ": truncated: header promises " + std::to_string(bytes) + " data bytes, file has " +
                     std::to_string(got));
  };
  if (gzdirect(f.get())) {
    const auto size = static_cast<std::int64_t>(std::filesystem::file_size(path));
    const std::int64_t header = 4 + 4 * static_cast<std::int64_t>(rank);
    if (size - header < bytes) throw truncated(std::max<std::int64_t>(0, size - header));
  }
  std::int64_t wanted = bytes;  // of the data
  if (first > 0 && first < a.dims[0]) {
    a.items = first;
    wanted = bytes / a.dims[0] * first;
  }
  // Counted, and for a file whose size was checked taken at once (grown step by step, its
  // copies at each doubling took up to three times the data).
  a.counted = CountedBytes(static_cast<std::size_t>(wanted));
  if (gzdirect(f.get())) a.data.reserve(static_cast<std::size_t>(wanted));
  constexpr std::size_t kStep = std::size_t{64} << 20;
  std::size_t have = 0;
  while (have < static_cast<std::size_t>(wanted)) {
    const std::size_t want = std::min(static_cast<std::size_t>(wanted) - have, kStep);
    a.data.resize(have + want);
    const std::size_t got = read_some(f.get(), a.data.data() + have, want, path);
    have += got;
    if (got != want) throw truncated(static_cast<std::int64_t>(have));
  }
  if (a.items >= 0) return a;  // the rest is not read
  std::uint8_t extra;
  if (read_some(f.get(), &extra, 1, path) != 0) {
    throw DataError(path + ": trailing bytes after the " + std::to_string(bytes) + " data bytes the header promises");
  }
  // zlib ignores bytes after the gzip stream; its trailer (the last 4 bytes of the file: the
  // uncompressed size mod 2^32) tells whether the file ends where the stream does.
  if (!gzdirect(f.get())) {
    std::ifstream raw(path, std::ios::binary | std::ios::ate);
    std::uint8_t tail[4] = {};
    if (raw.tellg() >= 4) {
      raw.seekg(-4, std::ios::end);
      raw.read(reinterpret_cast<char*>(tail), 4);
    }
    const std::uint32_t isize = std::uint32_t{tail[0]} | (std::uint32_t{tail[1]} << 8) | (std::uint32_t{tail[2]} << 16) |
                                (std::uint32_t{tail[3]} << 24);
    const auto total = static_cast<std::uint64_t>(4 + 4 * rank + bytes);
    if (isize != static_cast<std::uint32_t>(total))
      throw DataError(path + ": bytes after the end of the compressed data (the gzip trailer does not close the file)");
  }
  return a;
}

void write_idx(const std::string& path, const IdxArray& a) {
  std::string out;
  out.push_back(0);
  out.push_back(0);
  out.push_back(static_cast<char>(a.type));
  out.push_back(static_cast<char>(a.dims.size()));
  for (auto d : a.dims) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((d >> s) & 0xff));
  }
  out.append(reinterpret_cast<const char*>(a.data.data()), a.data.size());
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (!f) throw DataError("cannot create " + path);
    int n = gzwrite(f, out.data(), static_cast<unsigned>(out.size()));
    gzclose(f);
    if (n != static_cast<int>(out.size())) throw DataError("cannot write " + path);
  } else {
    write_file_atomic(path, out);
  }
}

}  // namespace weft
