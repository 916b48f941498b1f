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
void full_io(bool write, int fd, void* data, std::int64_t bytes, std::int64_t at, const std::string& path,
             const std::string& what) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = write ? ::pwrite(fd, p, static_cast<std::size_t>(bytes), at) : ::pread(fd, p, static_cast<std::size_t>(bytes), at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(what + " offload: cannot " + (write ? "write " : "read ") + path + ": " +
                  (n < 0 ? std::strerror(errno) : "the file ended"));
    p += n;
    bytes -= n;
    at += n;
  }
}

}  // namespace

StateStore::StateStore(const std::vector<Shape>& shapes, DType dtype, int kinds) : kinds_(kinds) {
  for (const Shape& shape : shapes) {
    shapes_.push_back(shape);
    dtypes_.push_back(dtype);
    const auto bytes = shape_numel(shape) * static_cast<std::int64_t>(dtype_size(dtype)) * kinds;
    total_bytes_ += bytes;
    largest_bytes_ = std::max(largest_bytes_, bytes);
  }
}

StateStore::StateStore(const std::vector<Tensor>& like, int kinds) : kinds_(kinds) {
  for (const Tensor& t : like) {
    shapes_.push_back(t.shape());
    dtypes_.push_back(t.dtype());
    const auto bytes = static_cast<std::int64_t>(t.nbytes()) * kinds;
    total_bytes_ += bytes;
    largest_bytes_ = std::max(largest_bytes_, bytes);
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

// In memory, made on first use (an offloaded store never holds them all).
Tensor& StateStore::held(std::size_t k, int kind) const {
  if (memory_.empty())
    for (std::size_t i = 0; i < shapes_.size(); ++i)
      for (int j = 0; j < kinds_; ++j) memory_.push_back(Tensor::zeros(shapes_[i], dtypes_[i]));
  return memory_[k * static_cast<std::size_t>(kinds_) + static_cast<std::size_t>(kind)];
}

void StateStore::offload(const std::string& dir, int slots, const std::string& what) {
  if (fd_ >= 0 || kinds_ == 0 || shapes_.empty()) return;
  what_ = what;
  for (DType d : dtypes_)
    if (d != dtypes_[0]) throw Error(what_ + " offload: the parameters must share one dtype");
  path_ = dir + "/weft-" + what_ + "-" + std::to_string(::getpid()) + "-" + std::to_string(g_files++) + ".bin";
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd_ < 0) throw Error(what_ + " offload: cannot create " + path_ + ": " + std::strerror(errno));
  // The buffers in memory go to the file; never made, they are zeros: the file's length.
  std::int64_t at = 0;
  for (std::size_t k = 0; k < shapes_.size(); ++k) {
    const std::int64_t bytes = shape_numel(shapes_[k]) * static_cast<std::int64_t>(dtype_size(dtypes_[k]));
    for (int j = 0; j < kinds_; ++j) {
      offsets_.push_back(at);
      if (!memory_.empty()) full_io(true, fd_, held(k, j).raw_data(), bytes, at, path_, what_);
      at += bytes;
    }
  }
  if (memory_.empty() && ::ftruncate(fd_, at) != 0)
    throw Error(what_ + " offload: cannot size " + path_ + ": " + std::strerror(errno));
  memory_.clear();
  slots_.resize(static_cast<std::size_t>(std::max(slots, 2)));
  for (Slot& s : slots_) s.flat.resize(static_cast<std::size_t>(kinds_));
  shrunk_ = true;  // the slots' memory comes with the first pass (what was freed meanwhile may serve)
  io_ = std::thread([this] { io_loop(); });
}

std::int64_t StateStore::resident_bytes() const {
  if (fd_ < 0) return total_bytes_;
  return static_cast<std::int64_t>(slots_.size()) * largest_bytes_;  // (what a pass holds)
}

void StateStore::request_reads() {
  for (Slot& s : slots_) {
    if (next_read_ >= order_.size()) break;  // (the reads queued still need the I/O thread woken)
    if (s.state != Slot::kFree) continue;
    const std::size_t k = order_[next_read_++];
    s.param = static_cast<long>(k);
    s.state = Slot::kReading;
    s.views.clear();
    const std::int64_t n = shape_numel(shapes_[k]);
    for (const Tensor& f : s.flat) s.views.push_back(f.slice(0, 0, n).view(shapes_[k]));
    queue_.push_back({false, static_cast<std::size_t>(&s - slots_.data())});
  }
  cv_.notify_all();
}

void StateStore::begin_pass(std::vector<std::size_t> order) {
  if (fd_ < 0) return;
  if (shrunk_) {  // the slots not made yet (offload) or given back (release_memory)
    std::int64_t most = 0;
    for (const Shape& s : shapes_) most = std::max(most, shape_numel(s));
    for (Slot& s : slots_)
      for (Tensor& t : s.flat) t = Tensor::empty({most}, dtypes_[0]);
    shrunk_ = false;
  }
  if (order.empty())
    for (std::size_t k = 0; k < shapes_.size(); ++k) order.push_back(k);
  std::lock_guard<std::mutex> lock(mu_);
  place_.assign(shapes_.size(), shapes_.size());
  for (std::size_t i = 0; i < order.size(); ++i) place_.at(order[i]) = i;
  order_ = std::move(order);
  next_read_ = 0;
  request_reads();
}

Tensor* StateStore::acquire(std::size_t k) {
  if (fd_ < 0) return &held(k, 0);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!error_.empty()) throw Error(error_);
    Slot* mine = nullptr;
    const std::size_t place = place_.at(k);
    if (place >= order_.size()) throw Error("offload: parameter " + std::to_string(k) + " is not in this pass");
    for (Slot& s : slots_) {
      if (s.state == Slot::kReady && place_[static_cast<std::size_t>(s.param)] < place) s.state = Slot::kFree;  // skipped
      if (s.param == static_cast<long>(k) && (s.state == Slot::kReading || s.state == Slot::kReady)) mine = &s;
    }
    if (!mine && next_read_ <= place) next_read_ = place;  // not read ahead: read it next
    request_reads();
    if (mine && mine->state == Slot::kReady) {
      mine->state = Slot::kInUse;
      return mine->views.data();
    }
    cv_.wait(lock);
  }
}

void StateStore::release(std::size_t k, bool changed) {
  if (fd_ < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (Slot& s : slots_) {
    if (s.param != static_cast<long>(k) || s.state != Slot::kInUse) continue;
    if (!changed) {
      s.state = Slot::kFree;
      s.param = -1;
      continue;
    }
    s.state = Slot::kWriting;
    queue_.push_back({true, static_cast<std::size_t>(&s - slots_.data())});
  }
  if (!changed) request_reads();
  cv_.notify_all();
}

void StateStore::end_pass() {
  if (fd_ < 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  next_read_ = order_.size();  // no more reads ahead
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
    full_io(write, fd_, v.raw_data(), static_cast<std::int64_t>(v.nbytes()), offset(k, j), path_, what_);
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

void StateStore::release_memory() {
  if (fd_ < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (Slot& s : slots_) {
    WEFT_CHECK(s.state == Slot::kFree, "release_memory during a pass");
    for (Tensor& t : s.flat) t = Tensor::empty({0}, dtypes_[0]);
    s.views.clear();
  }
  shrunk_ = true;
}

Tensor StateStore::read(std::size_t k, int kind) const {
  if (fd_ < 0) return held(k, kind).clone();
  Tensor t = Tensor::empty(shapes_[k], dtypes_[k]);
  full_io(false, fd_, t.raw_data(), static_cast<std::int64_t>(t.nbytes()), offset(k, kind), path_, what_);
  return t;
}

void StateStore::write(std::size_t k, int kind, const Tensor& value) {
  const Tensor v = value.contiguous();
  if (fd_ < 0) {
    held(k, kind).copy_(v);
    return;
  }
  Tensor t = v;  // (a copy only to change the type)
  if (v.dtype() != dtypes_[k]) {
    t = Tensor::empty(shapes_[k], dtypes_[k]);
    t.copy_(v);
  }
  WEFT_CHECK(t.shape() == shapes_[k], "state store: a buffer written in another shape");
  full_io(true, fd_, const_cast<void*>(t.raw_data()), static_cast<std::int64_t>(t.nbytes()), offset(k, kind), path_, what_);
}

}  // namespace weft
