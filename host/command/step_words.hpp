#pragma once
// How the console names a run's steps, counted in all from 0.
#include <string>

namespace mnistdp {

// "300 steps done, epoch 0 up to its step 299", "938 steps done, 1 epoch complete".
std::string progress_words(long steps_done, int steps_per_epoch);

// "epoch 0, step 248".
std::string step_words(long step, int steps_per_epoch);

// "epoch 0, steps 0 to 49", "epoch 0, step 900 to epoch 1, step 12".
std::string steps_words(long first, long last, int steps_per_epoch);

// What follows "batch 64" where a step accumulates micro-batches: " x 4 micro-batches a step (256 rows)";
// nothing for one.
std::string accumulate_words(int accumulate, int batch_size);

}  // namespace mnistdp
