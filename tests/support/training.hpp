// Small training runs for MPI tests: a shared scratch corpus, a tiny GPT config, and bitwise
// comparison of model + optimizer state.
#pragma once
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/app/trainer.hpp"

namespace gridtrain::test {

int world_rank();
/// A shared scratch directory (made by rank 0) with a small corpus in it; collective over world.
std::string shared_dir(const std::string& name);
/// A 2-layer GPT on dir's corpus, micro-batch 2, warmup 4 and decay 8 steps (so that a short
/// run is a prefix of a longer one).
Config tiny(const std::string& dir, int steps, int global_batch);
/// Copies of every parameter and optimizer state tensor.
std::vector<torch::Tensor> snapshot(Trainer& t);
bool bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b);
/// Runs `resumed` to its end and checks that it continues `straight` (whose run returned `full`)
/// bit for bit: the same loss at every step from its start step on, the same final parameters
/// and optimizer state.
void check_continues(Trainer& resumed, const RunResult& full, Trainer& straight);

}  // namespace gridtrain::test
