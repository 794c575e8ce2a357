#pragma once
// One host thread per replica, kept for the whole run, as nn.DataParallel's parallel_apply runs each
// replica's forward on its own thread. run(f) calls f(r) for every replica r at once and returns when all
// have finished; the first exception thrown by any of them is rethrown on the caller's thread.
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mnistdp {

class ReplicaWorkers {
 public:
  // Replica 0 runs on the calling thread, so `replicas` replicas need replicas - 1 threads.
  explicit ReplicaWorkers(int replicas);
  ~ReplicaWorkers();
  ReplicaWorkers(const ReplicaWorkers&) = delete;
  ReplicaWorkers& operator=(const ReplicaWorkers&) = delete;

  void run(const std::function<void(int)>& task);

 private:
  void worker_loop(int replica);

  int replicas_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  const std::function<void(int)>* task_ = nullptr;
  unsigned long generation_ = 0;  // bumped for every run(), so a worker runs each task once
  int pending_ = 0;               // workers still busy with the current task
  bool stopping_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace mnistdp
