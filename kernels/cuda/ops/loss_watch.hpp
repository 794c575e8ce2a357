#pragma once
// Every training step's loss checked on the device (host/cuda/cuda_replica.hpp): the kernel that runs after
// the loss is known (the SGD kernel, the fused step's last kernel, the persistent kernel's last phase)
// numbers the step and notes the first whose loss is not finite, so that the host learns of it at its next
// wait for the device anyway, with no wait of its own, and can still name the exact step. A step replayed
// from a graph or run inside a persistent launch is numbered by the device itself: nothing of the count is
// frozen into a graph's arguments.
#include <cuda_runtime_api.h>

namespace mnistdp::cuda {

// One replica's record, in device memory. Written by one thread of the step's last kernel, in stream order.
struct LossWatch {
  long long next_step = 0;    // the number, in all, of the next step the record sees
  long long first_bad = -1;   // the first step whose loss sum was not finite; -1 while there is none
  float bad_loss_sum = 0.0f;  // that step's loss sum: NaN or an infinity
};

// watch: [1] device memory <- a record that numbers the next step next_step and has seen no bad loss. Queued
// on `stream`, behind the steps already there.
void start_loss_watch(LossWatch* watch, long long next_step, cudaStream_t stream);

}  // namespace mnistdp::cuda
