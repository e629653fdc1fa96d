#include "gridtrain/model/recompute.hpp"

#include <ATen/autocast_mode.h>

#include "gridtrain/precision/autocast.hpp"

namespace gridtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides the saved inputs, held by the context as a capsule.
struct Recipe : torch::CustomClassHolder {
  Piece piece;
  std::vector<torch::Tensor> params;  // plain handles: ZeRO stage 3 refills their storage before backward
  std::size_t inputs = 0;
  torch::DeviceType device = torch::kCPU;
  torch::ScalarType autocast = torch::kFloat;  // kFloat: autocast was off
};

class RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
 public:
  // all: the inputs, then the parameters (so that the function's gradient edges reach them); a
  // TensorList, which Function::apply counts tensor by tensor (a vector would be one non-tensor).
  static torch::Tensor forward(AutogradContext* ctx, at::TensorList all, c10::intrusive_ptr<Recipe> recipe) {
    const variable_list inputs(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(recipe->inputs));
    ctx->save_for_backward(inputs);
    auto out = recipe->piece(inputs);  // grad mode is off here: nothing of it is kept
    ctx->saved_data["recipe"] = c10::IValue::make_capsule(std::move(recipe));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, const variable_list& grad_out) {
    auto recipe = c10::static_intrusive_pointer_cast<Recipe>(ctx->saved_data["recipe"].toCapsule());
    const auto saved = ctx->get_saved_variables();
    variable_list inputs, wrt;  // wrt: what this backward differentiates with respect to
    std::vector<std::size_t> slot;  // its place among the function's inputs
    for (std::size_t i = 0; i < saved.size(); ++i) {
      inputs.push_back(saved[i].detach().requires_grad_(ctx->needs_input_grad(i)));
      if (ctx->needs_input_grad(i)) wrt.push_back(inputs.back()), slot.push_back(i);
    }
    for (std::size_t j = 0; j < recipe->params.size(); ++j)
      if (ctx->needs_input_grad(saved.size() + j)) wrt.push_back(recipe->params[j]), slot.push_back(saved.size() + j);
    torch::Tensor out;
    {
      torch::AutoGradMode grad(true);
      AutocastGuard autocast(recipe->autocast, recipe->device);
      out = recipe->piece(inputs);
    }
    const auto grads = torch::autograd::grad({out}, wrt, {grad_out[0]}, /*retain_graph=*/false,
                                             /*create_graph=*/false, /*allow_unused=*/true);
    variable_list result(saved.size() + recipe->params.size());
    for (std::size_t k = 0; k < slot.size(); ++k) result[slot[k]] = grads[k];
    result.emplace_back();  // the recipe is not a tensor: no gradient
    return result;
  }
};

}  // namespace

torch::Tensor recomputed(const Piece& piece, const std::vector<torch::Tensor>& inputs,
                         const std::vector<torch::Tensor>& params) {
  if (!torch::GradMode::is_enabled()) return piece(inputs);
  auto recipe = c10::make_intrusive<Recipe>();
  recipe->piece = piece;
  recipe->params = params;
  recipe->inputs = inputs.size();
  recipe->device = inputs.front().device().type();
  if (at::autocast::is_autocast_enabled(recipe->device)) recipe->autocast = at::autocast::get_autocast_dtype(recipe->device);
  variable_list all = inputs;
  all.insert(all.end(), params.begin(), params.end());
  return RecomputeFunction::apply(at::TensorList(all), std::move(recipe));
}

}  // namespace gridtrain
