#pragma once
// How a global batch is split across replicas: torch.chunk's sizes, as nn.DataParallel's scatter uses them.
// Every replica but the tail gets ceil(batch / replicas) rows; 64 over 3 gives 22, 22, 20, and 5 over 4 gives
// 2, 2, 1, 0 (torch.chunk returns only three chunks there; the fourth replica gets no rows and still takes
// part in the all-reduce, contributing zeros).

namespace mnistdp {

struct Shard {
  int first;  // offset of the replica's rows within the global batch
  int count;  // number of rows, possibly 0
};

inline Shard shard_of(int batch, int replicas, int replica) {
  const int chunk = (batch + replicas - 1) / replicas;
  const int first = chunk * replica < batch ? chunk * replica : batch;
  const int last = first + chunk < batch ? first + chunk : batch;
  return {first, last - first};
}

}  // namespace mnistdp
