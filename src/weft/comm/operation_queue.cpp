#include "weft/comm/operation_queue.h"

namespace weft::comm {

void Work::finish(std::exception_ptr error) {
  std::vector<std::function<void(std::exception_ptr)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_at_ = std::chrono::steady_clock::now();
    error_ = error;
    done_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
    cv_.notify_all();
  }
  for (auto& f : callbacks) f(error);
}

void Work::on_finish(std::function<void(std::exception_ptr)> callback) {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_.load(std::memory_order_acquire)) {
      callbacks_.push_back(std::move(callback));
      return;
    }
    error = error_;
  }
  callback(error);
}

void Work::wait() {
  if (owner_ && !done_.load(std::memory_order_acquire)) owner_->drive(this);
  if (!done_.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_.load(); });
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

void Work::start() {
  if (owner_ && !done_.load(std::memory_order_acquire)) owner_->start(p2p_);
}

bool Work::test() {
  if (done_.load(std::memory_order_acquire)) return true;
  start();  // a polled operation must progress
  return done_.load(std::memory_order_acquire);
}

std::chrono::steady_clock::time_point Work::finished_at() {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_at_;
}

bool Work::failed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && error_ != nullptr;
}

OperationQueue::OperationQueue(Runner run) : run_(std::move(run)) {
  thread_ = std::thread([this] { worker(); });
}

OperationQueue::~OperationQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

WorkPtr OperationQueue::submit(std::shared_ptr<Operation> task) {
  WorkPtr w = task->work;
  w->owner_ = this;
  w->p2p_ = task->kind != Operation::kCollective;
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(task));
  // The worker is not woken here: most operations are waited for at once, and the waiting
  // thread runs them itself. Waking a thread that finds nothing to do costs two context
  // switches, the better part of a small all-reduce when ranks share cores.
  return w;
}

std::vector<std::shared_ptr<Operation>> OperationQueue::take_batch() {
  // Called with mu_ held, the queue non-empty and nothing running.
  std::vector<std::shared_ptr<Operation>> batch{queue_.front()};
  queue_.pop_front();
  // Point-to-point operations issued back to back run as one step.
  if (batch[0]->kind != Operation::kCollective) {
    while (!queue_.empty() && queue_.front()->kind != Operation::kCollective) {
      batch.push_back(queue_.front());
      queue_.pop_front();
    }
    p2p_demanded_ = false;
  }
  if (queue_.empty()) started_ = false;
  running_ = true;
  return batch;
}

void OperationQueue::run_batch(std::vector<std::shared_ptr<Operation>>& batch) {
  std::exception_ptr error;
  try {
    run_(batch);
  } catch (...) {
    error = std::current_exception();
  }
  bool wake_worker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    wake_worker = stop_ || (started_ && ready_locked());
  }
  idle_cv_.notify_all();
  if (wake_worker) cv_.notify_all();
  for (auto& t : batch) t->work->finish(error);
}

bool OperationQueue::ready_locked() const {
  if (queue_.empty() || running_) return false;
  if (queue_.front()->kind == Operation::kCollective || p2p_demanded_) return true;
  // Point-to-point tasks wait until someone waits on one of them or a collective follows
  // them, so that all the sends and receives posted together run together.
  for (const auto& t : queue_)
    if (t->kind == Operation::kCollective) return true;
  return false;
}

void OperationQueue::drive(Work* work) {
  for (;;) {
    std::vector<std::shared_ptr<Operation>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      idle_cv_.wait(lock, [&] { return !running_; });
      bool queued = false;
      for (const auto& t : queue_) queued = queued || t->work.get() == work;
      if (!queued) return;  // it ran, or is finishing
      // Everything before it runs first, in order; point-to-point tasks in front of it (or
      // with it) run now.
      if (queue_.front()->kind != Operation::kCollective) p2p_demanded_ = true;
      batch = take_batch();
    }
    run_batch(batch);
  }
}

void OperationQueue::start(bool p2p) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) return;  // it is running (or done)
    if (started_ && (p2p_demanded_ || !p2p)) return;  // already under way: no wake-up
    started_ = true;
    if (p2p) p2p_demanded_ = true;
  }
  cv_.notify_all();
}

void OperationQueue::worker() {
  for (;;) {
    std::vector<std::shared_ptr<Operation>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return (stop_ && !running_) || (started_ && ready_locked()); });
      if (!ready_locked()) {
        if (queue_.empty()) return;
        p2p_demanded_ = true;  // stopping: run what is left
        continue;
      }
      batch = take_batch();
    }
    run_batch(batch);
  }
}

}  // namespace weft::comm
