#include "weft/optim/state_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "weft/util/error.h"

namespace weft {

namespace {

std::atomic<int> g_files{0};

// Whole reads and writes at an offset (the calls may move fewer bytes than asked).
void full_io(bool write, int fd, void* data, std::int64_t bytes, std::int64_t at, const std::string& path) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = write ? ::pwrite(fd, p, static_cast<std::size_t>(bytes), at) : ::pread(fd, p, static_cast<std::size_t>(bytes), at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(std::string("optimizer offload: cannot ") + (write ? "write " : "read ") + path + ": " +
                  (n < 0 ? std::strerror(errno) : "the file ended"));
    p += n;
    bytes -= n;
    at += n;
  }
}

}  // namespace

StateStore::StateStore(const std::vector<Tensor>& like, int kinds) : kinds_(kinds) {
  for (const Tensor& t : like) {
    shapes_.push_back(t.shape());
    dtypes_.push_back(t.dtype());
    const auto bytes = static_cast<std::int64_t>(t.nbytes()) * kinds;
    total_bytes_ += bytes;
    largest_bytes_ = std::max(largest_bytes_, bytes);
    for (int j = 0; j < kinds; ++j) memory_.push_back(Tensor::zeros(t.shape(), t.dtype()));
  }
}

StateStore::~StateStore() {
  if (io_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    io_.join();
  }
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

void StateStore::offload(const std::string& dir, int slots) {
  if (fd_ >= 0 || kinds_ == 0 || shapes_.empty()) return;
  for (DType d : dtypes_)
    if (d != dtypes_[0]) throw Error("optimizer offload: the parameters must share one dtype");
  path_ = dir + "/weft-optimizer-" + std::to_string(::getpid()) + "-" + std::to_string(g_files++) + ".bin";
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd_ < 0) throw Error("optimizer offload: cannot create " + path_ + ": " + std::strerror(errno));
  std::int64_t at = 0, most = 0;
  for (std::size_t k = 0; k < shapes_.size(); ++k) {
    for (int j = 0; j < kinds_; ++j) {
      Tensor& t = memory_[k * static_cast<std::size_t>(kinds_) + static_cast<std::size_t>(j)];
      offsets_.push_back(at);
      full_io(true, fd_, t.raw_data(), static_cast<std::int64_t>(t.nbytes()), at, path_);
      at += static_cast<std::int64_t>(t.nbytes());
    }
    most = std::max(most, memory_[k * static_cast<std::size_t>(kinds_)].numel());
  }
  memory_.clear();
  slots_.resize(static_cast<std::size_t>(std::max(slots, 2)));
  for (Slot& s : slots_)
    for (int j = 0; j < kinds_; ++j) s.flat.push_back(Tensor::empty({most}, dtypes_[0]));
  io_ = std::thread([this] { io_loop(); });
}

std::int64_t StateStore::resident_bytes() const {
  if (fd_ < 0) return total_bytes_;
  std::int64_t n = 0;
  for (const Slot& s : slots_)
    for (const Tensor& t : s.flat) n += static_cast<std::int64_t>(t.nbytes());
  return n;
}

void StateStore::request_reads() {
  for (Slot& s : slots_) {
    if (next_read_ >= shapes_.size()) return;
    if (s.state != Slot::kFree) continue;
    const std::size_t k = next_read_++;
    s.param = static_cast<long>(k);
    s.state = Slot::kReading;
    s.views.clear();
    const std::int64_t n = shape_numel(shapes_[k]);
    for (const Tensor& f : s.flat) s.views.push_back(f.slice(0, 0, n).view(shapes_[k]));
    queue_.push_back({false, static_cast<std::size_t>(&s - slots_.data())});
  }
  cv_.notify_all();
}

void StateStore::begin_pass() {
  if (fd_ < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  next_read_ = 0;
  request_reads();
}

Tensor* StateStore::acquire(std::size_t k) {
  if (fd_ < 0) return &memory_[k * static_cast<std::size_t>(kinds_)];
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!error_.empty()) throw Error(error_);
    Slot* mine = nullptr;
    for (Slot& s : slots_) {
      if (s.state == Slot::kReady && s.param < static_cast<long>(k)) s.state = Slot::kFree;  // skipped
      if (s.param == static_cast<long>(k) && (s.state == Slot::kReading || s.state == Slot::kReady)) mine = &s;
    }
    if (!mine && next_read_ <= k) next_read_ = k;  // not read ahead: read it next
    request_reads();
    if (mine && mine->state == Slot::kReady) {
      mine->state = Slot::kInUse;
      return mine->views.data();
    }
    cv_.wait(lock);
  }
}

void StateStore::release(std::size_t k) {
  if (fd_ < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (Slot& s : slots_) {
    if (s.param != static_cast<long>(k) || s.state != Slot::kInUse) continue;
    s.state = Slot::kWriting;
    queue_.push_back({true, static_cast<std::size_t>(&s - slots_.data())});
  }
  cv_.notify_all();
}

void StateStore::end_pass() {
  if (fd_ < 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  next_read_ = shapes_.size();  // no more reads ahead
  cv_.wait(lock, [&] {
    return !error_.empty() || std::none_of(slots_.begin(), slots_.end(), [](const Slot& s) {
      return s.state == Slot::kReading || s.state == Slot::kWriting || s.state == Slot::kInUse;
    });
  });
  for (Slot& s : slots_) {
    s.state = Slot::kFree;
    s.param = -1;
  }
  if (!error_.empty()) throw Error(error_);
}

void StateStore::transfer(Slot& s, bool write) const {
  const auto k = static_cast<std::size_t>(s.param);
  for (int j = 0; j < kinds_; ++j) {
    Tensor& v = s.views[static_cast<std::size_t>(j)];
    full_io(write, fd_, v.raw_data(), static_cast<std::int64_t>(v.nbytes()), offset(k, j), path_);
  }
}

void StateStore::io_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const Io io = queue_.front();
    queue_.pop_front();
    Slot& s = slots_[io.slot];
    lock.unlock();
    std::string failure;
    try {
      transfer(s, io.write);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    lock.lock();
    if (!failure.empty() && error_.empty()) error_ = failure;
    if (io.write) {
      s.state = Slot::kFree;
      s.param = -1;
      request_reads();
    } else {
      s.state = Slot::kReady;
    }
    cv_.notify_all();
  }
}

Tensor StateStore::read(std::size_t k, int kind) const {
  if (fd_ < 0) return memory_[k * static_cast<std::size_t>(kinds_) + static_cast<std::size_t>(kind)].clone();
  Tensor t = Tensor::empty(shapes_[k], dtypes_[k]);
  full_io(false, fd_, t.raw_data(), static_cast<std::int64_t>(t.nbytes()), offset(k, kind), path_);
  return t;
}

void StateStore::write(std::size_t k, int kind, const Tensor& value) {
  const Tensor v = value.contiguous();
  if (fd_ < 0) {
    memory_[k * static_cast<std::size_t>(kinds_) + static_cast<std::size_t>(kind)].copy_(v);
    return;
  }
  Tensor t = Tensor::empty(shapes_[k], dtypes_[k]);
  t.copy_(v);
  full_io(true, fd_, t.raw_data(), static_cast<std::int64_t>(t.nbytes()), offset(k, kind), path_);
}

}  // namespace weft
