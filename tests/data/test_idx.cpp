#include <gtest/gtest.h>

#include <sys/resource.h>
#include <zlib.h>

#include <fstream>
#include <set>

#include "../test_support.h"
#include "weft/data/dataloader.h"
#include "weft/data/dataset.h"
#include "weft/data/idx.h"
#include "weft/data/images.h"
#include "weft/tensor/allocator.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

using namespace weft;
using weft::testing::TempDir;

namespace {
IdxArray small_images() {
  IdxArray a;
  a.dims = {3, 2, 2};
  a.data = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 255};
  return a;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(Idx, RoundTripRawAndGzip) {
  TempDir dir;
  for (const char* name : {"a-idx3-ubyte", "a-idx3-ubyte.gz"}) {
    write_idx(dir / name, small_images());
    IdxArray b = read_idx(dir / name);
    EXPECT_EQ(b.dims, (std::vector<std::int64_t>{3, 2, 2}));
    EXPECT_EQ(b.data, small_images().data);
    EXPECT_EQ(b.value(11), 255.0);
  }
}

// Image data larger than the memory a ceiling leaves is refused before it is read, in IDX
// (raw or compressed) and CSV (NPY's 1 TiB in cli.error.npy_past_memory), and counts while
// it is held.
TEST(Idx, DataPastTheMemoryCeilingIsRefusedBeforeItIsRead) {
  TempDir dir;
  IdxArray big;
  big.dims = {64, 64, 64};
  big.data.assign(64 * 64 * 64, 7);  // 256 KiB
  std::string csv;
  for (int i = 0; i < 2000; ++i) {  // 8x8 images, 260 KB of text: 1 MB as doubles, 512 KiB as floats
    csv += std::to_string(i % 3);
    for (int k = 0; k < 64; ++k) csv += ",1";
    csv += "\n";
  }
  std::ofstream(dir / "train.csv") << csv;
  const auto refusal = [](auto&& read) {
    try {
      read();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (const char* name : {"big-idx3-ubyte", "big-idx3-ubyte.gz"}) {
    write_idx(dir / name, big);
    const std::size_t before = allocator_live_bytes();
    {
      const AllocationCeiling ceiling(before + allocator_cached_bytes() + (128 << 10), "reading the test's images");
      const std::string error = refusal([&] { read_idx(dir / name); });
      EXPECT_EQ(error.rfind("reading the test's images: its tensors would pass", 0), 0u) << name << ": " << error;
      EXPECT_NE(error.find("256.00 KiB more asked"), std::string::npos) << error;
      EXPECT_EQ(allocator_live_bytes(), before);
    }
    const IdxArray read = read_idx(dir / name);
    EXPECT_GE(allocator_live_bytes(), before + (256 << 10)) << name;  // counted while held
  }
  EXPECT_EQ(read_image_split(dir.path(), "train").images.shape(), (Shape{2000, 1, 8, 8}));
  // The text refused before it is read; then the values parsed from it (as doubles), though
  // the text and the images as floats would fit.
  for (const std::size_t room : {std::size_t{128} << 10, std::size_t{900} << 10}) {
    const AllocationCeiling ceiling(allocator_live_bytes() + allocator_cached_bytes() + room, "reading the test's table");
    const std::string error = refusal([&] { read_image_split(dir.path(), "train"); });
    EXPECT_EQ(error.rfind("reading the test's table: its tensors would pass", 0), 0u) << room << ": " << error;
  }
}

// A run limited to its first samples reads only those: the header's dimensions as the file
// states them, the first items' data; a raw file shorter than its header still fails (its
// size is checked), a compressed one cut after the items read does not (never read).
TEST(Idx, FirstItemsOnly) {
  TempDir dir;
  for (const char* name : {"a-idx3-ubyte", "a-idx3-ubyte.gz"}) {
    write_idx(dir / name, small_images());
    IdxArray b = read_idx(dir / name, 2);
    EXPECT_EQ(b.dims, (std::vector<std::int64_t>{3, 2, 2}));
    EXPECT_EQ(b.items, 2);
    EXPECT_EQ(b.count(), 8);
    const std::vector<std::uint8_t> all = small_images().data;
    EXPECT_EQ(b.data, std::vector<std::uint8_t>(all.begin(), all.begin() + 8));
    EXPECT_EQ(read_idx(dir / name, 3).data, small_images().data);  // all of them: read as a whole
    EXPECT_EQ(read_idx(dir / name, 9).count(), 12);
  }
  std::string raw = read_file(dir / "a-idx3-ubyte");
  write_file_atomic(dir / "cut", raw.substr(0, raw.size() - 1));
  EXPECT_NE(error_of([&] { read_idx(dir / "cut", 1); }).find("truncated"), std::string::npos);
  {
    gzFile g = gzopen((dir / "cut.gz").c_str(), "wb");
    gzwrite(g, raw.data(), static_cast<unsigned>(raw.size() - 4));  // the last item short
    gzclose(g);
  }
  EXPECT_EQ(read_idx(dir / "cut.gz", 2).count(), 8);
  EXPECT_NE(error_of([&] { read_idx(dir / "cut.gz"); }).find("truncated"), std::string::npos);
}

TEST(Idx, MultiByteTypesAreBigEndian) {
  TempDir dir;
  IdxArray a;
  a.type = 0x0B;  // int16
  a.dims = {2};
  a.data = {0xff, 0xfe, 0x01, 0x00};
  write_idx(dir / "s", a);
  IdxArray b = read_idx(dir / "s");
  EXPECT_EQ(b.value(0), -2.0);
  EXPECT_EQ(b.value(1), 256.0);
}

TEST(Idx, RejectsMissingTruncatedAndCorruptFiles) {
  TempDir dir;
  EXPECT_NE(error_of([&] { read_idx(dir / "missing"); }).find("no such file"), std::string::npos);
  std::string good = [&] {
    write_idx(dir / "good", small_images());
    return read_file(dir / "good");
  }();
  auto check = [&](const std::string& bytes, const std::string& expected) {
    write_file_atomic(dir / "bad", bytes);
    std::string msg = error_of([&] { read_idx(dir / "bad"); });
    EXPECT_NE(msg.find(expected), std::string::npos) << "got: " << msg;
    EXPECT_NE(msg.find(dir / "bad"), std::string::npos) << "the message names the file: " << msg;
  };
  check(good.substr(0, good.size() - 3), "truncated");
  check(good.substr(0, 2), "truncated");
  check(good.substr(0, 9), "truncated in the dimension sizes");
  check(good + "xx", "trailing bytes");
  std::string magic = good;
  magic[0] = 'P';
  check(magic, "not an IDX file");
  std::string type = good;
  type[2] = 0x07;
  check(type, "unknown IDX element type");
  std::string rank = good;
  rank[3] = 0;
  check(rank, "rank 0");
  std::string zero_dim = good;
  zero_dim[7] = 0;
  check(zero_dim, "dimension 0 has size 0");
  std::string huge = good;
  huge[4] = '\x7f';
  huge[8] = '\x7f';
  check(huge, "implausible size");
  // A truncated gzip stream.
  write_idx(dir / "z.gz", small_images());
  std::string gz = read_file(dir / "z.gz");
  write_file_atomic(dir / "bad", gz.substr(0, gz.size() / 2));
  EXPECT_NE(error_of([&] { read_idx(dir / "bad"); }), "no error");
  // Bytes after a complete gzip stream (zlib itself ignores them).
  write_file_atomic(dir / "bad.gz", gz + "GARBAGE-AFTER-THE-STREAM");
  EXPECT_NE(error_of([&] { read_idx(dir / "bad.gz"); }).find("bytes after the end of the compressed data"),
            std::string::npos);
  EXPECT_EQ(read_idx(dir / "z.gz").data, small_images().data);
  EXPECT_NE(error_of([&] { read_idx(dir.path()); }).find("directory"), std::string::npos);
}

// A header that promises 2 GiB in a file of a few bytes is refused before the 2 GiB are
// allocated: an uncompressed file by its size, a compressed one after one 64 MiB step.
TEST(Idx, HeadersAreNotBelievedBeforeTheData) {
  TempDir dir;
  IdxArray liar;
  liar.dims = {16};
  liar.data.assign(16, 7);
  write_idx(dir / "liar", liar);
  std::string bytes = read_file(dir / "liar");
  bytes[4] = '\x7f';  // dimension 0: 0x7f000010 bytes
  write_file_atomic(dir / "liar", bytes);
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  EXPECT_NE(error_of([&] { read_idx(dir / "liar"); }).find("truncated: header promises 2130706448 data bytes, file has 16"),
            std::string::npos);
  IdxArray small;
  small.dims = {16};
  small.data.assign(16, 7);
  write_idx(dir / "liar.gz", small);
  // The same lie inside a gzip stream: rewrite the stream with the lying header.
  write_file_atomic(dir / "raw", bytes);
  {
    gzFile g = gzopen((dir / "liar.gz").c_str(), "wb");
    gzwrite(g, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(g);
  }
  EXPECT_NE(error_of([&] { read_idx(dir / "liar.gz"); }).find("truncated: header promises 2130706448"),
            std::string::npos);
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 512 * 1024) << "KiB of peak memory grew";  // not 2 GiB
}

TEST(Dataset, LoadsAndNormalizesMnistFormat) {
  TempDir dir;
  weft::testing::write_synthetic_mnist(dir.path(), 50, 20);
  ImageDataset train = load_mnist_format(dir.path(), "train", 0.5, 0.25);
  EXPECT_EQ(train.images.shape(), (Shape{50, 1, 28, 28}));
  EXPECT_EQ(train.size(), 50);
  IdxArray raw = read_idx(dir / "train-images-idx3-ubyte.gz");
  EXPECT_NEAR(train.images.at({3, 0, 5, 7}), (raw.data[3 * 784 + 5 * 28 + 7] / 255.0 - 0.5) / 0.25, 1e-5);
  EXPECT_EQ(load_mnist_format(dir.path(), "test", 0.5, 0.25, 7).size(), 7);
}

TEST(Dataset, RejectsBadFolders) {
  TempDir dir;
  EXPECT_NE(error_of([&] { load_mnist_format(dir / "nope", "train"); }).find("does not exist"), std::string::npos);
  EXPECT_NE(error_of([&] { load_mnist_format(dir.path(), "train"); }).find("has no train-images"), std::string::npos);
  weft::testing::write_synthetic_mnist(dir.path(), 10, 5);
  // Labels that do not match the images.
  IdxArray labels;
  labels.dims = {9};
  labels.data.assign(9, 1);
  write_idx(dir / "train-labels-idx1-ubyte.gz", labels);
  EXPECT_NE(error_of([&] { load_mnist_format(dir.path(), "train"); }).find("9 labels"), std::string::npos);
  labels.dims = {10};
  labels.data.assign(10, 12);
  write_idx(dir / "train-labels-idx1-ubyte.gz", labels);
  EXPECT_NE(error_of([&] { load_mnist_format(dir.path(), "train"); }).find("label 12"), std::string::npos);
  EXPECT_EQ(resolve_data_dir("fashion-mnist", ""), kFashionMnistDir);
  EXPECT_EQ(resolve_data_dir("fashion-mnist", "/x"), "/x");
  EXPECT_EQ(resolve_data_dir("/y", ""), "/y");
}

TEST(DataLoader, SeededShufflingCoversEverySampleOncePerEpoch) {
  TempDir dir;
  weft::testing::write_synthetic_mnist(dir.path(), 103, 5);
  ImageDataset ds = load_mnist_format(dir.path(), "train");
  DataLoader loader(ds, {10, true, false, 42});
  EXPECT_EQ(loader.num_batches(), 11);
  auto e0 = loader.epoch_order(0), e1 = loader.epoch_order(1);
  EXPECT_EQ(e0, DataLoader(ds, {10, true, false, 42}).epoch_order(0));  // same seed, same order
  EXPECT_NE(e0, e1);                                                     // reshuffled per epoch
  EXPECT_NE(e0, DataLoader(ds, {10, true, false, 43}).epoch_order(0));
  std::multiset<std::int64_t> seen;
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < loader.num_batches(); ++b) {
    Batch batch = loader.batch(e0, b);
    total += static_cast<std::int64_t>(batch.labels.size());
    for (size_t i = 0; i < batch.labels.size(); ++i) {
      std::int64_t idx = e0[b * 10 + static_cast<std::int64_t>(i)];
      seen.insert(idx);
      EXPECT_EQ(batch.labels[i], ds.labels[idx]);
      EXPECT_EQ(batch.images.at({static_cast<std::int64_t>(i), 0, 3, 3}), ds.images.at({idx, 0, 3, 3}));
    }
  }
  EXPECT_EQ(total, 103);
  EXPECT_EQ(std::set<std::int64_t>(seen.begin(), seen.end()).size(), 103u);
  EXPECT_EQ(DataLoader(ds, {10, true, true, 42}).num_batches(), 10);  // drop_last
  EXPECT_THROW(DataLoader(ds, {0, true, false, 0}), ConfigError);
  EXPECT_THROW(DataLoader(ds, {-3, true, false, 0}), ConfigError);
}
