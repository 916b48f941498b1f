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

// A symbolic link is followed: the file it names (through a chain, a relative target read
// from its link's folder) is replaced and the link stays a link; a pipe is written in place,
// not replaced by a regular file.
TEST(AtomicFileWriter, FollowsLinksAndWritesPipesInPlace) {
  TempDir dir;
  std::filesystem::create_directories(dir / "runs");
  weft::write_file_atomic(dir / "runs/real.json", "old");
  std::filesystem::create_symlink("runs/real.json", dir / "link1");
  std::filesystem::create_symlink(dir / "link1", dir / "link2");
  weft::write_file_atomic(dir / "link2", "new");
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link2"));
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link1"));
  EXPECT_EQ(weft::read_file(dir / "runs/real.json"), "new");
  EXPECT_EQ(weft::link_target(dir / "link2"), (std::filesystem::path(dir.path()) / "runs/real.json").string());
  // A dangling link names the file to make.
  std::filesystem::create_symlink("runs/made.json", dir / "dangling");
  weft::write_file_atomic(dir / "dangling", "made");
  EXPECT_EQ(weft::read_file(dir / "runs/made.json"), "made");
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "dangling"));
  // A loop of links is refused, naming the path.
  std::filesystem::create_symlink("loop-b", dir / "loop-a");
  std::filesystem::create_symlink("loop-a", dir / "loop-b");
  EXPECT_THROW(weft::write_file_atomic(dir / "loop-a", "x"), weft::ConfigError);

  const std::string fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(weft::written_in_place(fifo));
  std::string got;
  std::thread reader([&] { got = weft::read_file(fifo); });
  weft::write_file_atomic(fifo, "through the pipe");
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the pipe was replaced by a regular file";
  EXPECT_NO_THROW(weft::check_output_file(fifo, "--out"));
}

// An output's folder is checked by making a file in it, so that it holds for root too: a
// folder of /proc or /sys, which the permission bits let root write in, is refused before
// the work, naming the flag and the path; the check leaves nothing behind.
TEST(CheckOutput, TriesTheFolderAsTheWriterWill) {
  for (const std::string path : {"/proc/weft-out.json", "/proc/self/weft/x.json", "/sys/weft-out.json"}) {
    try {
      weft::check_output_file(path, "--out");
      FAIL() << path << " was taken";
    } catch (const weft::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--out " + path + ": cannot write in the folder"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(weft::check_output_folder("/proc/weft-checkpoints", "--checkpoint-dir"), weft::ConfigError);
  TempDir dir;
  weft::check_output_file(dir / "a/b/out.json", "--out");
  weft::check_output_folder(dir / "c", "--out");
  EXPECT_EQ(files_in(dir.path()), 0);
}
