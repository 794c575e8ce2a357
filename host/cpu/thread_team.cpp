#include "host/cpu/thread_team.hpp"

#include <stdexcept>

namespace mnistdp {

namespace {

// Waits until `value` differs from `old`: a short spin, which covers the microseconds a step's phases take,
// then a sleep in the kernel.
template <class T>
T wait_for_change(const std::atomic<T>& value, T old) {
  for (int spin = 0; spin < 4096; ++spin) {
    const T now = value.load(std::memory_order_acquire);
    if (now != old) return now;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  for (;;) {
    value.wait(old, std::memory_order_acquire);
    const T now = value.load(std::memory_order_acquire);
    if (now != old) return now;
  }
}

}  // namespace

ThreadTeam::ThreadTeam(int size) : size_(size) {
  if (size < 1) throw std::invalid_argument("ThreadTeam: a team needs at least one member");
  threads_.reserve(static_cast<std::size_t>(size - 1));
  for (int member = 1; member < size; ++member)
    threads_.emplace_back([this, member] { worker(member); });
}

ThreadTeam::~ThreadTeam() {
  stopping_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& t : threads_)
    t.join();
}

void ThreadTeam::run_member(int member) {
  try {
    (*task_)(member);
  } catch (const Aborted&) {
    // Released from a barrier after another member threw; that member's exception is the one reported.
  } catch (...) {
    {
      const std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    aborted_.store(true, std::memory_order_release);
    barrier_phase_.fetch_add(1, std::memory_order_release);  // wake whoever waits at a barrier
    barrier_phase_.notify_all();
  }
}

void ThreadTeam::run(const std::function<void(int)>& task) {
  if (size_ == 1) {
    task(0);
    return;
  }
  task_ = &task;
  finished_.store(0, std::memory_order_relaxed);
  arrived_.store(0, std::memory_order_relaxed);
  aborted_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  run_member(0);
  for (int done = finished_.load(std::memory_order_acquire); done != size_ - 1;)
    done = wait_for_change(finished_, done);
  task_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadTeam::barrier() {
  if (size_ == 1) return;
  const unsigned phase = barrier_phase_.load(std::memory_order_acquire);
  if (aborted_.load(std::memory_order_acquire)) throw Aborted{};
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == size_) {
    arrived_.store(0, std::memory_order_relaxed);
    barrier_phase_.fetch_add(1, std::memory_order_release);
    barrier_phase_.notify_all();
    return;
  }
  wait_for_change(barrier_phase_, phase);
  if (aborted_.load(std::memory_order_acquire)) throw Aborted{};
}

void ThreadTeam::worker(int member) {
  unsigned seen = 0;
  for (;;) {
    seen = wait_for_change(generation_, seen);
    if (stopping_.load(std::memory_order_acquire)) return;
    run_member(member);
    finished_.fetch_add(1, std::memory_order_acq_rel);
    finished_.notify_all();
  }
}

}  // namespace mnistdp
