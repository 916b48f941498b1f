#include "weft/comm/channel.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include "weft/util/error.h"

namespace weft::comm {

namespace {
constexpr std::size_t kStagingBytes = 256 * 1024;
constexpr std::uint64_t kSegmentMagic = 0x5745465453484d31ULL;  // "WEFTSHM1"
#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23;  // (Linux 5.14's value, for older headers)
#endif

struct SegmentHeader {
  std::uint64_t magic;
  std::uint32_t slots;
  std::uint32_t pad;
  std::uint64_t ring_bytes;
  std::int32_t pid;
  std::int32_t pad2;
  Doorbell bell;
};

std::size_t header_bytes() { return (sizeof(SegmentHeader) + 63) / 64 * 64; }
std::size_t slot_bytes(std::size_t ring_bytes) { return sizeof(RingHeader) + ring_bytes; }
}  // namespace

// --- TCP ---

TcpChannel::TcpChannel(Socket s) : socket_(std::move(s)), staging_(new std::uint8_t[kStagingBytes]) {
  set_nonblocking(socket_.fd(), true);
  set_nodelay(socket_.fd());
  set_buffer_sizes(socket_.fd(), 4 << 20);
}

void TcpChannel::abort() { ::shutdown(socket_.fd(), SHUT_RDWR); }

std::size_t TcpChannel::write_some(const void* data, std::size_t n) {
  if (n == 0) return 0;
  ssize_t w = ::send(socket_.fd(), data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w >= 0) return static_cast<std::size_t>(w);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  throw CommError(std::string("connection lost (") + std::strerror(errno) + ")");
}

std::size_t TcpChannel::read_some(void* data, std::size_t n) {
  if (n == 0) return 0;
  ssize_t r = ::recv(socket_.fd(), data, n, MSG_DONTWAIT);
  if (r > 0) return static_cast<std::size_t>(r);
  if (r == 0) throw CommError("the peer closed the connection");
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  throw CommError(std::string("connection lost (") + std::strerror(errno) + ")");
}

std::size_t TcpChannel::consume_some(std::size_t n, const Consumer& consume) {
  std::size_t got = read_some(staging_.get(), std::min(n, kStagingBytes));
  if (got > 0) consume(staging_.get(), got);
  return got;
}

// --- doorbell ---

void Doorbell::ring() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_seq_cst) != 0) {
    seq.fetch_add(1, std::memory_order_seq_cst);
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&seq), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
}

void Doorbell::wait(std::uint32_t seen, int timeout_us) {
  timespec ts{timeout_us / 1000000, static_cast<long>(timeout_us % 1000000) * 1000};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&seq), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

// --- segments ---

std::unique_ptr<ShmSegment> ShmSegment::create(const std::string& name, int slots, std::size_t ring_bytes) {
  std::unique_ptr<ShmSegment> s(new ShmSegment());
  s->name_ = "/weft-" + name;
  s->owner_ = true;
  s->ring_bytes_ = ring_bytes;
  s->size_ = header_bytes() + static_cast<std::size_t>(slots) * slot_bytes(ring_bytes);
  int fd = ::shm_open(s->name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw CommError("cannot create shared memory " + s->name_ + ": " + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(s->size_)) != 0) {
    int e = errno;
    ::close(fd);
    ::shm_unlink(s->name_.c_str());
    throw CommError("cannot size shared memory " + s->name_ + " to " + std::to_string(s->size_) +
                    " bytes: " + std::strerror(e) + " (is /dev/shm large enough?)");
  }
  // MAP_POPULATE: fault every page in now, not on the first message through it.
  s->base_ = ::mmap(nullptr, s->size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (s->base_ == MAP_FAILED) {
    s->base_ = nullptr;
    ::shm_unlink(s->name_.c_str());
    throw CommError("cannot map shared memory " + s->name_ + ": " + std::strerror(errno));
  }
  auto* h = new (s->base_) SegmentHeader();
  h->slots = static_cast<std::uint32_t>(slots);
  h->ring_bytes = ring_bytes;
  h->pid = ::getpid();
  for (int i = 0; i < slots; ++i) new (&s->ring(i)) RingHeader();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  h->magic = kSegmentMagic;
  return s;
}

std::unique_ptr<ShmSegment> ShmSegment::open(const std::string& name) {
  std::unique_ptr<ShmSegment> s(new ShmSegment());
  s->name_ = "/weft-" + name;
  int fd = ::shm_open(s->name_.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw CommError("cannot open shared memory " + s->name_ + ": " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  s->size_ = static_cast<std::size_t>(st.st_size);
  if (s->size_ < header_bytes()) {
    ::close(fd);
    throw CommError("shared memory " + s->name_ + " is too small");
  }
  // Not populated: a peer writes to one ring of the segment (populate_slot), and faulting in
  // every ring of every peer's segment cost each of N local ranks N^2 ring sizes of page
  // tables (36 MiB a rank with 6 ranks).
  s->base_ = ::mmap(nullptr, s->size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (s->base_ == MAP_FAILED) {
    s->base_ = nullptr;
    throw CommError("cannot map shared memory " + s->name_ + ": " + std::strerror(errno));
  }
  auto* h = static_cast<SegmentHeader*>(s->base_);
  if (h->magic != kSegmentMagic ||
      header_bytes() + h->slots * slot_bytes(h->ring_bytes) != s->size_) {
    throw CommError("shared memory " + s->name_ + " is not a weft segment");
  }
  s->ring_bytes_ = h->ring_bytes;
  return s;
}

ShmSegment::~ShmSegment() {
  if (base_) ::munmap(base_, size_);
  if (owner_) ::shm_unlink(name_.c_str());
}

void ShmSegment::unlink() {
  if (owner_) ::shm_unlink(name_.c_str());
  owner_ = false;
}

void ShmSegment::populate_slot(int slot) {
  // Fault in the pages of the header and of this slot now, not on the first message through
  // them (MADV_POPULATE_WRITE, Linux 5.14; on older kernels they fault in on first use).
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  auto* base = static_cast<std::uint8_t*>(base_);
  const std::size_t begin = static_cast<std::size_t>(reinterpret_cast<std::uint8_t*>(&ring(slot)) - base) / page * page;
  const std::size_t end = std::min(size_, (static_cast<std::size_t>(ring_data(slot) - base) + ring_bytes_ + page - 1) / page * page);
  ::madvise(base, std::min(size_, header_bytes()), kPopulateWrite);
  ::madvise(base + begin, end - begin, kPopulateWrite);
}

Doorbell& ShmSegment::doorbell() { return static_cast<SegmentHeader*>(base_)->bell; }
int ShmSegment::owner_pid() const { return static_cast<SegmentHeader*>(base_)->pid; }
RingHeader& ShmSegment::ring(int slot) {
  return *reinterpret_cast<RingHeader*>(static_cast<std::uint8_t*>(base_) + header_bytes() +
                                        static_cast<std::size_t>(slot) * slot_bytes(ring_bytes_));
}
std::uint8_t* ShmSegment::ring_data(int slot) { return reinterpret_cast<std::uint8_t*>(&ring(slot)) + sizeof(RingHeader); }

// --- shared-memory channel ---

ShmChannel::ShmChannel(RingHeader& out, std::uint8_t* out_data, RingHeader& in, std::uint8_t* in_data,
                       std::size_t ring_bytes, Doorbell& peer_bell, int peer_pid)
    : out_(out), out_data_(out_data), in_(in), in_data_(in_data), cap_(ring_bytes), peer_bell_(peer_bell),
      peer_pid_(peer_pid) {}

namespace {
void throw_if_aborted(const RingHeader& a, const RingHeader& b) {
  if (a.aborted.load(std::memory_order_relaxed) || b.aborted.load(std::memory_order_relaxed))
    throw CommError("the peer gave up the operation (it failed there)");
}
}  // namespace

void ShmChannel::abort() {
  out_.aborted.store(1, std::memory_order_relaxed);
  in_.aborted.store(1, std::memory_order_relaxed);
  peer_bell_.ring();
}

std::size_t ShmChannel::write_some(const void* data, std::size_t n) {
  const std::uint64_t head = out_.head.load(std::memory_order_relaxed);
  const std::uint64_t tail = out_.tail.load(std::memory_order_acquire);
  std::size_t k = std::min<std::size_t>(n, cap_ - static_cast<std::size_t>(head - tail));
  if (k == 0) {
    throw_if_aborted(out_, in_);
    return 0;
  }
  std::size_t at = static_cast<std::size_t>(head % cap_);
  std::size_t first = std::min(k, cap_ - at);
  std::memcpy(out_data_ + at, data, first);
  if (k > first) std::memcpy(out_data_, static_cast<const std::uint8_t*>(data) + first, k - first);
  out_.head.store(head + k, std::memory_order_release);
  peer_bell_.ring();
  return k;
}

std::size_t ShmChannel::consume_some(std::size_t n, const Consumer& consume) {
  const std::uint64_t tail = in_.tail.load(std::memory_order_relaxed);
  const std::uint64_t head = in_.head.load(std::memory_order_acquire);
  std::size_t k = std::min<std::size_t>(n, static_cast<std::size_t>(head - tail));
  if (k == 0) {
    throw_if_aborted(out_, in_);
    return 0;
  }
  std::size_t at = static_cast<std::size_t>(tail % cap_);
  std::size_t first = std::min(k, cap_ - at);
  consume(in_data_ + at, first);
  if (k > first) consume(in_data_, k - first);
  in_.tail.store(tail + k, std::memory_order_release);
  peer_bell_.ring();
  return k;
}

std::size_t ShmChannel::read_some(void* data, std::size_t n) {
  auto* dst = static_cast<std::uint8_t*>(data);
  std::size_t done = 0;
  return consume_some(n, [&](const std::uint8_t* p, std::size_t k) {
    std::memcpy(dst + done, p, k);
    done += k;
  });
}

}  // namespace weft::comm
