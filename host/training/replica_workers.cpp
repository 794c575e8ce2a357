#include "host/training/replica_workers.hpp"

namespace mnistdp {

ReplicaWorkers::ReplicaWorkers(int replicas) : replicas_(replicas) {
  for (int r = 1; r < replicas_; ++r)
    threads_.emplace_back([this, r] { worker_loop(r); });
}

ReplicaWorkers::~ReplicaWorkers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_)
    t.join();
}

void ReplicaWorkers::run(const std::function<void(int)>& task) {
  if (replicas_ == 1) {
    task(0);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    task_ = &task;
    pending_ = replicas_ - 1;
    error_ = nullptr;
    ++generation_;
  }
  start_.notify_all();
  std::exception_ptr own_error;
  try {
    task(0);
  } catch (...) {
    own_error = std::current_exception();
  }
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  task_ = nullptr;
  if (own_error) std::rethrow_exception(own_error);
  if (error_) std::rethrow_exception(error_);
}

void ReplicaWorkers::worker_loop(int replica) {
  unsigned long seen = 0;
  for (;;) {
    const std::function<void(int)>* task = nullptr;
    {
      std::unique_lock lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      task = task_;
    }
    std::exception_ptr error;
    try {
      (*task)(replica);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      if (error && !error_) error_ = error;
      --pending_;
    }
    done_.notify_one();
  }
}

}  // namespace mnistdp
