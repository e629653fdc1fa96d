#include "gridtrain/parallel/tensor_parallel.hpp"

#include <cstdint>
#include <limits>

namespace gridtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The axis travels through the autograd context as an integer (IValue holds no raw pointers);
// it outlives every graph built during a step.
std::int64_t handle(Axis& a) { return static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(&a)); }
Axis& axis_of(AutogradContext* ctx) {
  return *reinterpret_cast<Axis*>(static_cast<std::intptr_t>(ctx->saved_data["axis"].toInt()));
}

// Sum (or max) over the axis, in fp32 whatever x's dtype, returned in x's dtype.
torch::Tensor all_reduce(const torch::Tensor& x, Axis& tp, bool max = false) {
  auto t = x.to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true).contiguous();  // one copy, reduced in place
  auto* p = t.data_ptr<float>();
  const auto n = static_cast<std::size_t>(t.numel());
  (max ? tp.allreduce_max(p, n, "tensor parallel") : tp.allreduce_sum(p, n, "tensor parallel")).wait();
  return t.to(x.scalar_type());
}

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t axis) {
    ctx->saved_data["axis"] = axis;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_reduce(g[0], axis_of(ctx)), torch::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, std::int64_t axis) {
    return all_reduce(x, *reinterpret_cast<Axis*>(static_cast<std::intptr_t>(axis)));
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], torch::Tensor()}; }
};

// loss_n = log Σ_v exp(z_nv) − z_n,target with the max, the sum and the target logit each
// reduced over tp; backward is local: softmax − one-hot.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               std::int64_t start, std::int64_t valid, std::int64_t axis) {
    Axis& tp = *reinterpret_cast<Axis*>(static_cast<std::intptr_t>(axis));
    auto z = logits.to(torch::kFloat);
    const auto local = z.size(1);
    if (valid < local) z = z.index_fill(1, torch::arange(valid, local, targets.options()), -INFINITY);
    z = z - all_reduce(std::get<0>(z.max(1)), tp, /*max=*/true).unsqueeze(1);
    auto e = z.exp();
    const auto sum = all_reduce(e.sum(1), tp);
    const auto mine = (targets >= start) & (targets < start + local);
    const auto index = (targets - start).clamp(0, local - 1).unsqueeze(1);
    // where, not a product: a rank whose shard is all padding gathers −inf, and −inf · 0 is NaN.
    const auto target_logit = all_reduce(torch::where(mine, z.gather(1, index).squeeze(1), 0.0), tp);
    ctx->save_for_backward({e / sum.unsqueeze(1), index, mine});
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(logits.scalar_type());
    return sum.log() - target_logit;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    auto grad = saved[0].scatter_add(1, saved[1], -saved[2].to(torch::kFloat).unsqueeze(1)) * g[0].unsqueeze(1);
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad.to(dtype), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor take_shard(const torch::Tensor& full, const ShardSpec& spec, int rank, int size) {
  if (spec.dim < 0) return full.contiguous();
  const std::int64_t rows = shard_rows(spec, size), valid = valid_rows(spec, rank, size);
  std::vector<torch::Tensor> pieces;
  for (const auto& part : full.chunk(spec.parts, spec.dim)) {
    auto piece = torch::zeros(local_shape({part.sizes().vec(), spec.dim, 1}, size), full.options());
    piece.narrow(spec.dim, 0, valid).copy_(part.narrow(spec.dim, rank * rows, valid));
    pieces.push_back(piece);
  }
  return torch::cat(pieces, spec.dim).contiguous();
}

torch::Tensor copy_to_tp(const torch::Tensor& x, Axis& tp) {
  return tp.size() == 1 ? x : CopyToTp::apply(x, handle(tp));
}

torch::Tensor reduce_from_tp(const torch::Tensor& x, Axis& tp) {
  return tp.size() == 1 ? x : ReduceFromTp::apply(x, handle(tp));
}

torch::Tensor vocab_parallel_embedding(const torch::Tensor& idx, const torch::Tensor& weight, std::int64_t start,
                                       Axis& tp) {
  if (tp.size() == 1) return torch::embedding(weight, idx);
  const auto outside = (idx < start) | (idx >= start + weight.size(0));
  auto e = torch::embedding(weight, (idx - start).masked_fill(outside, 0));
  return reduce_from_tp(e.masked_fill(outside.unsqueeze(-1), 0.0), tp);
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           std::int64_t start, std::int64_t valid, Axis& tp) {
  return VocabParallelCrossEntropy::apply(logits, targets, start, valid, handle(tp));
}

}  // namespace gridtrain
