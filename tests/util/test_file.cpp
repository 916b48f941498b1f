// Files replaced atomically, whole or piece by piece (util/file.h).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "../test_support.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

using weft::AtomicFileWriter;
using weft::testing::TempDir;

namespace {
int files_in(const std::string& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}
}  // namespace

// Pieces small and large (past the writer's buffer) arrive in order; until commit the old
// file is what a reader sees, and a writer dropped without commit leaves it and no
// temporary file behind.
TEST(AtomicFileWriter, PiecesLandInOrderAndOnlyOnCommit) {
  TempDir dir;
  const std::string path = dir / "table.csv";
  weft::write_file_atomic(path, "old\n");
  std::string want;
  {
    AtomicFileWriter w(path);
    for (int i = 0; i < 50000; ++i) {
      const std::string row = std::to_string(i) + ",row\n";
      w.write(row);
      want += row;
    }
    const std::string big(3 << 20, 'x');  // one piece larger than the buffer
    w.write(big);
    want += big;
    w.write("end\n");
    want += "end\n";
    EXPECT_EQ(weft::read_file(path), "old\n");
    w.commit();
    EXPECT_THROW(w.write("more"), weft::InternalError);
  }
  EXPECT_EQ(weft::read_file(path), want);
  {
    AtomicFileWriter dropped(path);
    dropped.write("half a table");
  }
  EXPECT_EQ(weft::read_file(path), want);
  EXPECT_EQ(files_in(dir.path()), 1);
  EXPECT_THROW(AtomicFileWriter(dir / "no-such-folder/x"), weft::CheckpointError);
}

// read_file reads a file whole in one buffer of its size, and on to the end where stat's size
// is not the file's (procfs says 0).
TEST(ReadFile, ReadsEveryByteWhateverStatSays) {
  TempDir dir;
  const std::string empty = dir.path() + "/empty", big = dir.path() + "/big";
  weft::write_file_atomic(empty, "");
  EXPECT_EQ(weft::read_file(empty), "");
  std::string bytes(3 * 1024 * 1024 + 17, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  weft::write_file_atomic(big, bytes);
  EXPECT_EQ(weft::read_file(big), bytes);
  const std::string status = weft::read_file("/proc/self/status");  // stat: size 0
  EXPECT_NE(status.find("\nPid:"), std::string::npos);
  EXPECT_THROW(weft::read_file(dir.path()), weft::DataError);
  EXPECT_THROW(weft::read_file(dir.path() + "/none"), weft::DataError);
}

// A file whose size stat cannot tell and that does not end (/dev/zero given as data) is
// refused after kUnsizedReadLimit bytes, naming the path, not read until memory runs out; a
// pipe that ends is read whole.
TEST(ReadFile, RefusesAnUnsizedFileThatDoesNotEnd) {
  try {
    weft::read_file("/dev/zero");
    FAIL() << "/dev/zero was read whole";
  } catch (const weft::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/zero is not a regular file and gave 256 MiB without ending"),
              std::string::npos)
        << e.what();
  }
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] {
    std::FILE* f = std::fopen(fifo.c_str(), "w");
    if (f) {
      std::fputs("through a pipe\n", f);
      std::fclose(f);
    }
  });
  const std::string text = weft::read_file(fifo);
  writer.join();
  EXPECT_EQ(text, "through a pipe\n");
}
