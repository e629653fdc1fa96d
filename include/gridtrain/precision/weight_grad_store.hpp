// Deferred weight gradients for zero-bubble pipeline schedules (Qi et al. 2024, "Zero Bubble
// Pipeline Parallelism", arXiv 2401.10241, §2): a stage's backward splits into B, the input
// gradient, which the previous stage waits for, and W, the linear layers' weight gradients
// dW = dYᵀX, which nothing waits for and which can fill the pipeline's bubbles.
//
// While a WeightGradStore is open, dense() (precision/matmul.hpp) builds its linears so that
// their backward computes dX and the bias gradient only and records (dY, X) here; the weight
// enters the product detached, so that autograd does not wait for it. run_oldest() then computes
// one backward pass's dWs and hands them to autograd at the weights as they entered dense() (the
// parameters, or their casts), so that they accumulate into .grad through the same nodes and
// hooks as an undeferred backward's. Here, beside dense(), because every linear goes through it.
#pragma once
#include <deque>
#include <vector>

#include <torch/types.h>

namespace gridtrain {

class WeightGradStore {
 public:
  /// Opens the process's store (one at a time: throws std::logic_error if one is open). Linears
  /// built by dense() from now on defer their weight gradients; close it (destroy) only after
  /// every backward through them has run, and their Ws.
  WeightGradStore();
  ~WeightGradStore();
  WeightGradStore(const WeightGradStore&) = delete;
  WeightGradStore& operator=(const WeightGradStore&) = delete;

  /// The open store, or null.
  static WeightGradStore* current();
  /// dense()'s backward: the weight gradient of one linear, dYᵀX, with dy (M, N) and x (M, K) in
  /// the compute dtype and `weight` (N, K) the tensor the gradient goes to.
  void defer(torch::Tensor weight, torch::Tensor dy, torch::Tensor x);
  /// Ends a backward pass B: the linears deferred since the last end_pass() are one W, which
  /// runs now unless `defer`, else waits for run_oldest().
  void end_pass(bool defer);
  /// Computes the oldest waiting W's weight gradients and accumulates them (no-op without one).
  void run_oldest();
  /// Seconds spent computing Ws so far (wall clock).
  double weight_seconds() const { return weight_s_; }

 private:
  struct Deferred {
    torch::Tensor weight, dy, x;
  };
  void run(std::deque<std::vector<Deferred>>::iterator at);  // computes and removes that W
  std::vector<Deferred> open_;               // the current backward pass's
  std::deque<std::vector<Deferred>> passes_;  // ended passes, oldest first
  double weight_s_ = 0;
};

/// y = x Wᵀ + b whose weight gradient goes to `store` (dense() while one is open): x (..., K),
/// weight (N, K), bias (N,) or undefined → (..., N), in autocast's dtype under autocast.
torch::Tensor deferred_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

}  // namespace gridtrain
