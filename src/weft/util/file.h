// Whole-file I/O with atomic replacement: write a temporary file in the same folder,
// fsync it, rename it over the target, fsync the folder. A reader sees the old file or
// the new one, never a half-written one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

void write_file_atomic(const std::string& path, std::string_view bytes);

// The same replacement for a file written piece by piece (a table of millions of rows need
// not be held whole): write() appends through a buffer, commit() flushes, fsyncs, renames
// and syncs the folder; without commit() the temporary file is removed and the target is
// left as it was.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void write(std::string_view bytes);
  void commit();

 private:
  void flush();
  std::string path_, tmp_;
  int fd_ = -1;
  std::string buffer_;
};
// Reads a whole file; throws DataError naming the path when it cannot. A file whose size is
// not known in advance (a device, a pipe, /proc) is read up to kUnsizedReadLimit bytes: one
// that gives more (/dev/zero) is refused, not read until memory runs out.
inline constexpr std::size_t kUnsizedReadLimit = std::size_t{256} << 20;
std::string read_file(const std::string& path);
bool file_exists(const std::string& path);
// Flushes a folder's entries (renames, new files) to the disk, as write_file_atomic does for
// the file it wrote; a folder that cannot be opened is left alone.
void sync_directory(const std::string& dir);
bool is_directory(const std::string& path);
// Creates a folder and its parents (like mkdir -p); throws ConfigError when it cannot.
void make_directories(const std::string& path);
// Output paths checked before the work that fills them, so that no run ends by losing
// what it made: a folder that exists and can be written in, or whose nearest existing
// ancestor can (the writer makes the rest: make_directories); a file that is not a folder
// and whose folder is such a folder (make_parent_directories). ConfigError naming `flag`
// and the path otherwise.
void check_output_folder(const std::string& path, const std::string& flag);
void check_output_file(const std::string& path, const std::string& flag);
// As check_output_file, for an output that replaces only a file of its own kind: an existing
// non-empty regular file (not a device or a pipe) whose first 4 KiB `is_kind` does not accept is refused ("--metrics m.bin
// exists and is not a metrics file: nothing is overwritten"), so that no output takes the
// place of an input or another saved file.
void check_replaceable_file(const std::string& path, const std::string& flag, const std::string& kind,
                            bool (*is_kind)(std::string_view head));
void make_parent_directories(const std::string& path);

}  // namespace weft
