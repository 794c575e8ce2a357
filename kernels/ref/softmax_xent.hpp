#pragma once
// Softmax cross-entropy, forward and backward in one pass (nn.CrossEntropyLoss with reduction "mean" over a
// global batch that may be split across replicas).
#include <cstdint>

namespace mnistdp::ref {

// logits: [batch, classes]  labels: [batch], each < classes
//   -> dlogits: [batch, classes] = (softmax(logits) - onehot(labels)) * grad_scale; nullptr skips it
//   -> returns the sum over the rows of -log softmax(logits)[label], computed with the log-sum-exp shift
// grad_scale is 1 / global batch, not 1 / batch: that is what lets shards of one batch sum to its gradient.
float softmax_xent(const float* logits, const std::uint8_t* labels, float* dlogits, int batch, int classes,
                   float grad_scale);

// One row of softmax_xent: z: [classes], label < classes -> dz: [classes] (or nullptr), as above; returns the
// row's -log softmax(z)[label], which softmax_xent sums over the rows in double, in row order.
float softmax_xent_row(const float* z, int label, float* dz, int classes, float grad_scale);

// logits: [batch, classes]  labels: [batch] -> how many rows have argmax == label (first maximum wins, as in
// torch.argmax)
int count_correct(const float* logits, const std::uint8_t* labels, int batch, int classes);

}  // namespace mnistdp::ref
