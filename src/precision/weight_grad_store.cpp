#include "gridtrain/precision/weight_grad_store.hpp"

#include <iterator>
#include <stdexcept>
#include <utility>

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include "gridtrain/precision/matmul.hpp"
#include "gridtrain/util/timer.hpp"

namespace gridtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The process's open store: one training thread builds and runs the pipeline, but autograd may
// run a backward on its device threads (CUDA), so not thread-local.
WeightGradStore*& open_store() {
  static WeightGradStore* store = nullptr;
  return store;
}

// The weight a DeferredLinear's gradient goes to, passed beside its autograd inputs, not as one.
struct Weight {
  torch::Tensor tensor;
};

// x Wᵀ + b with W outside the graph: all = {x} or {x, b} (an undefined tensor may not be an
// autograd input), x saved flattened to (M, K) in the compute dtype.
struct DeferredLinear : torch::autograd::Function<DeferredLinear> {
  static torch::Tensor forward(AutogradContext* ctx, at::TensorList all, Weight w) {
    const auto& x = all[0];
    const auto x2 = x.reshape({-1, x.size(-1)});  // (M, K)
    auto y = gemm(x2, w.tensor.detach().t());    // (M, N)
    if (all.size() == 2) y = y + all[1];
    ctx->save_for_backward({x2});
    ctx->saved_data["weight"] = w.tensor;
    ctx->saved_data["biased"] = all.size() == 2;
    auto shape = x.sizes().vec();
    shape.back() = w.tensor.size(0);
    return y.view(shape);  // (..., N)
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto x2 = ctx->get_saved_variables()[0];
    const auto weight = ctx->saved_data["weight"].toTensor();
    const auto dy = g[0].reshape({-1, weight.size(0)});  // (M, N)
    variable_list grads(ctx->saved_data["biased"].toBool() ? 3 : 2);  // x, (b,) and none for the Weight
    if (ctx->needs_input_grad(0)) {
      auto shape = g[0].sizes().vec();
      shape.back() = weight.size(1);
      grads[0] = gemm(dy, weight.detach()).view(shape);  // dX = dY W
    }
    if (grads.size() == 3 && ctx->needs_input_grad(1)) grads[1] = dy.sum(0);
    WeightGradStore* store = WeightGradStore::current();
    if (!store) throw std::logic_error("a deferred linear's backward ran after its WeightGradStore closed");
    store->defer(weight, dy, x2);
    return grads;
  }
};

}  // namespace

WeightGradStore::WeightGradStore() {
  if (open_store()) throw std::logic_error("a WeightGradStore is open already");
  open_store() = this;
}

WeightGradStore::~WeightGradStore() { open_store() = nullptr; }

WeightGradStore* WeightGradStore::current() { return open_store(); }

void WeightGradStore::defer(torch::Tensor weight, torch::Tensor dy, torch::Tensor x) {
  open_.push_back({std::move(weight), std::move(dy), std::move(x)});
}

void WeightGradStore::end_pass(bool defer) {
  passes_.push_back(std::exchange(open_, {}));
  if (!defer) run(std::prev(passes_.end()));
}

void WeightGradStore::run_oldest() {
  if (!passes_.empty()) run(passes_.begin());
}

void WeightGradStore::run(std::deque<std::vector<Deferred>>::iterator at) {
  const std::vector<Deferred> pass = std::move(*at);
  passes_.erase(at);
  if (pass.empty()) return;
  const Stopwatch clock;
  std::vector<torch::Tensor> roots, grads;
  for (const Deferred& d : pass) {
    roots.push_back(d.weight);
    grads.push_back(gemm(d.dy.t(), d.x));  // dW = dYᵀX (N, K), in the compute dtype as the weight entered
  }
  // One engine run for the pass: through each weight's cast (if any) into its .grad, its
  // accumulator's hooks firing as in an undeferred backward.
  torch::autograd::backward(roots, grads);
  weight_s_ += clock.seconds();
}

torch::Tensor deferred_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  // Cast as autocast casts a linear's operands, outside the autograd function, so that the
  // weight's gradient passes back through its cast.
  const auto type = x.device().type();
  const auto dtype = at::autocast::is_autocast_enabled(type) ? at::autocast::get_autocast_dtype(type) : x.scalar_type();
  const auto in = bias.defined() ? variable_list{x.to(dtype), bias.to(dtype)} : variable_list{x.to(dtype)};
  return DeferredLinear::apply(at::TensorList(in), Weight{weight.to(dtype)});
}

}  // namespace gridtrain
