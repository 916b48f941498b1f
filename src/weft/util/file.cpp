#include "weft/util/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "weft/util/error.h"

namespace weft {

namespace {
std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, std::string_view bytes, const std::string& path) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw CheckpointError("cannot write " + path + ": " + errno_text());
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}
}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFileWriter w(path);
  w.write(bytes);
  w.commit();
}

namespace {
constexpr std::size_t kWriterBuffer = 1 << 20;
}

std::string link_target(const std::string& path) {
  std::string at = path;
  for (int hops = 0; hops < 40; ++hops) {  // (the kernel's own limit on a chain of links)
    std::error_code ec;
    const std::filesystem::path p(at);
    if (at.rfind("/proc/", 0) == 0 || !std::filesystem::is_symlink(p, ec)) return at;
    const std::filesystem::path next = std::filesystem::read_symlink(p, ec);
    if (ec) return at;
    at = (next.is_absolute() ? next : p.parent_path() / next).string();
  }
  throw ConfigError(path + ": too many levels of symbolic links");
}

bool written_in_place(const std::string& target) {
  struct stat st {};
  if (::stat(target.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) return false;
  return !S_ISREG(st.st_mode) || target.rfind("/proc/", 0) == 0;
}

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(link_target(path)) {
  if (written_in_place(path_)) {  // a device, a pipe, a descriptor's link (/dev/stdout): as `>` writes it
    fd_ = ::open(path_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd_ < 0) throw CheckpointError("cannot open " + path_ + " for writing: " + errno_text());
    return;
  }
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw CheckpointError("cannot create " + tmp_ + ": " + errno_text());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::flush() {
  write_all(fd_, buffer_, open_file());
  buffer_.clear();
}

void AtomicFileWriter::write(std::string_view bytes) {
  if (fd_ < 0) throw InternalError("write after commit: " + path_);
  if (buffer_.size() + bytes.size() > kWriterBuffer) flush();
  if (bytes.size() >= kWriterBuffer) write_all(fd_, bytes, open_file());
  else buffer_.append(bytes);
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) throw InternalError("committed twice: " + path_);
  flush();
  if (tmp_.empty()) {  // written in place: nothing to rename
    ::close(fd_);
    fd_ = -1;
    return;
  }
  if (::fsync(fd_) != 0) throw CheckpointError("cannot fsync " + tmp_ + ": " + errno_text());
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    std::string why = errno_text();
    ::unlink(tmp_.c_str());
    throw CheckpointError("cannot rename " + tmp_ + " to " + path_ + ": " + why);
  }
  std::filesystem::path target(path_);
  sync_directory(target.has_parent_path() ? target.parent_path().string() : ".");
}

void sync_directory(const std::string& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_file(const std::string& path) {
  if (is_directory(path)) throw DataError(path + " is a directory, expected a file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError("cannot open " + path + ": " + errno_text());
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  // Read into one buffer of the file's size (a stream grown by doubling and copied out at
  // the end touched three times the memory, and fresh pages are what a read costs most on a
  // virtual machine); then on to the end, for files whose size was unknown (/proc) or grew.
  struct stat st {};
  const bool sized = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
  const std::size_t expected = sized ? static_cast<std::size_t>(st.st_size) : 0;
  std::string out(expected + 1, '\0');  // (the extra byte sees a file that grew)
  std::size_t have = 0;
  for (;;) {
    if (!sized && have >= kUnsizedReadLimit) {
      throw DataError(path + " is not a regular file and gave " + std::to_string(kUnsizedReadLimit >> 20) +
                      " MiB without ending (a device or a pipe?): save what it holds to a file and pass that");
    }
    if (have == out.size()) out.resize(std::max<std::size_t>(out.size() * 2, 64 * 1024));
    const ssize_t n = ::read(fd, out.data() + have, out.size() - have);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw DataError("cannot read " + path + ": " + errno_text());
    }
    if (n == 0) break;
    have += static_cast<std::size_t>(n);
  }
  out.resize(have);
  return out;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_directories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec || !is_directory(path)) {
    throw ConfigError("cannot create directory " + path + ": " +
                      (ec ? ec.message() : std::string("not a directory")));
  }
}

namespace {
// By making a file there, as the writer will (a permission check passes for root where the
// file system refuses: /proc, /sys, a read-only mount).
void check_writable_folder(const std::string& folder, const std::string& flag, const std::string& path) {
  std::string probe = (std::filesystem::path(folder) / ".weft-write-check-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    throw ConfigError(flag + " " + path + ": cannot write in the folder " + folder + " (" + std::strerror(errno) + ")");
  ::close(fd);
  ::unlink(probe.c_str());
}

// `folder` exists and can be written in, or its nearest existing ancestor can (`path`, as
// the user gave it, for the message).
void check_creatable_folder(const std::string& folder, const std::string& flag, const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(folder, ec).lexically_normal();
  const auto exists = [&ec](const std::filesystem::path& q) { return std::filesystem::exists(q, ec); };
  while (!p.empty() && !exists(p) && p != p.parent_path()) p = p.parent_path();
  if (exists(p) && !is_directory(p.string()))
    throw ConfigError(flag + " " + path + ": " + p.string() + " is a file, not a folder");
  check_writable_folder(p.string(), flag, path);
}
}  // namespace

void check_output_folder(const std::string& path, const std::string& flag) { check_creatable_folder(path, flag, path); }

void check_output_file(const std::string& path, const std::string& flag) {
  if (is_directory(path)) throw ConfigError(flag + " " + path + " is a folder, not a file");
  const std::string target = link_target(path);
  if (written_in_place(target)) {
    if (::access(target.c_str(), W_OK) != 0)
      throw ConfigError(flag + " " + path + ": cannot write it (" + std::strerror(errno) + ")");
    return;
  }
  const std::string folder = std::filesystem::path(target).parent_path().string();
  check_creatable_folder(folder.empty() ? "." : folder, flag, path);
}

void check_replaceable_file(const std::string& path, const std::string& flag, const std::string& kind,
                            const std::function<bool(std::string_view head)>& is_kind) {
  check_output_file(path, flag);
  if (!file_exists(path) || written_in_place(link_target(path))) return;  // new, or not replaced (/dev/stdout)
  const std::string head = read_file_head(path);
  if (!head.empty() && !is_kind(head))
    throw ConfigError(flag + " " + path + " exists and is not " + kind + ": nothing is overwritten (give a new path)");
}

std::string read_file_head(const std::string& path, std::size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  std::string head(bytes, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return head;
}

bool is_chrome_trace_head(std::string_view head) {
  return head.substr(0, 1) == "{" &&
         (head.find("\"traceEvents\"") != std::string_view::npos || head.find("\"displayTimeUnit\"") != std::string_view::npos);
}

void make_parent_directories(const std::string& path) {
  const std::string folder = std::filesystem::path(path).parent_path().string();
  if (!folder.empty()) make_directories(folder);
}

}  // namespace weft
