// Whole-file I/O with atomic replacement: write a temporary file in the same folder,
// fsync it, rename it over the target, fsync the folder. A reader sees the old file or
// the new one, never a half-written one. A symbolic link is followed (the file it names is
// replaced, the link stays); a device, a pipe or /dev/stdout is written as it is
// (written_in_place).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

void write_file_atomic(const std::string& path, std::string_view bytes);

// The file a write to `path` lands in: symbolic links followed (a relative target read from
// its link's folder; a dangling link names the file to create), up to a link in /proc (a
// descriptor's, which names no path: /dev/stdout). ConfigError past 40 links.
std::string link_target(const std::string& path);
// True where a write to `target` (link_target's) goes into the file as it is, not by
// replacing it: an existing device, pipe or socket, or a file in /proc.
bool written_in_place(const std::string& target);

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
  // The file the bytes go to: the temporary one, or the device or pipe written in place.
  const std::string& open_file() const { return tmp_.empty() ? path_ : tmp_; }
  std::string path_, tmp_;  // tmp_ empty: path_ is written in place
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
// and whose folder (after links) is such a folder (make_parent_directories), or a file
// written in place that can be written. "Can be written in" is tried by making a file
// there, so that it holds for root too (/proc, /sys, a read-only mount). ConfigError naming
// `flag` and the path otherwise.
void check_output_folder(const std::string& path, const std::string& flag);
void check_output_file(const std::string& path, const std::string& flag);
// As check_output_file, for an output that replaces only a file of its own kind: an existing
// non-empty file that would be replaced (not one written in place) whose first 4 KiB
// `is_kind` does not accept is refused ("--metrics m.bin exists and is not a metrics file:
// nothing is overwritten"), so that no output takes the place of an input or a saved file.
void check_replaceable_file(const std::string& path, const std::string& flag, const std::string& kind,
                            const std::function<bool(std::string_view head)>& is_kind);
void make_parent_directories(const std::string& path);
// The first `bytes` bytes of the file at `path` (fewer when it is shorter; none when it
// cannot be read): what the checks above and the readers that tell files by kind look at.
std::string read_file_head(const std::string& path, std::size_t bytes = 4096);
// Whether a file's first bytes are a Chrome trace's: a JSON object whose head names
// "traceEvents" (or "displayTimeUnit", which weft writes before it).
bool is_chrome_trace_head(std::string_view head);

}  // namespace weft
