#pragma once
// A row offset kept in device memory: where the next batch starts in the epoch's order. A CUDA graph freezes
// its kernels' arguments, so a graph that is to serve every batch of an epoch must read the offset from the
// device (cuda::gather_normalize_at) and move it on itself; these are the two one-thread kernels that do.
#include <cuda_runtime_api.h>

namespace mnistdp::cuda {

// cursor: [1] device memory <- value. Launched outside graphs, when the host's next offset is not the one the
// device holds (a new epoch, a resumed run).
void set_cursor(int* cursor, int value, cudaStream_t stream);

// cursor: [1] device memory <- *cursor + delta. Captured at the end of a step's graph, after the gather that
// read the offset.
void advance_cursor(int* cursor, int delta, cudaStream_t stream);

}  // namespace mnistdp::cuda
