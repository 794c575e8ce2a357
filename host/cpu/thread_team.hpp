#pragma once
// A team of threads that runs one task on all its members at once, with barriers inside the task: how one CPU
// replica splits a step among --threads cores. The members wait for work and at barriers by spinning a short
// while and then sleeping in the kernel (std::atomic::wait), so a step's few microsecond-long phases cost no
// system calls on idle cores, and an oversubscribed machine is not stalled by spinning threads.
#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mnistdp {

class ThreadTeam {
 public:
  // `size` members: the caller of run() is member 0, so size - 1 threads are started.
  explicit ThreadTeam(int size);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return size_; }

  // Calls task(member) on every member and returns when all have returned. The first exception any member
  // threw is rethrown here; the members still at a barrier are then released from it.
  void run(const std::function<void(int member)>& task);

  // Within a task: returns once every member has called it.
  void barrier();

 private:
  struct Aborted {};  // unwinds a member out of a barrier that a throwing member will never reach

  void worker(int member);
  void run_member(int member);

  int size_;
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<unsigned> generation_{0};  // bumped by run(): a new task for the workers
  std::atomic<int> finished_{0};         // workers done with the current task
  std::atomic<int> arrived_{0};          // members at the current barrier
  std::atomic<unsigned> barrier_phase_{0};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> stopping_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace mnistdp
