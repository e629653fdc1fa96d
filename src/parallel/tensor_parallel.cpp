#include "gridtrain/parallel/tensor_parallel.hpp"

#include <cstdint>
#include <limits>
#include <stdexcept>

#include <ATen/autocast_mode.h>

#include "gridtrain/precision/matmul.hpp"
#include "autograd_axis.hpp"

namespace gridtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr auto handle = axis_handle;

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
    return all_reduce(x, axis_from(axis));
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], torch::Tensor()}; }
};

// Sequence parallelism's collectives. A rank's slice is a contiguous block of the micro-batch's
// B·T tokens, so both run on the tensors' own storage, without a transpose.

// x (B, T/t, C), this rank's tokens → (B, T, C): every rank's, in rank order, in x's dtype.
torch::Tensor all_gather_sequence(const torch::Tensor& x, Axis& tp) {
  const auto local = x.contiguous();
  auto full = torch::empty({x.size(0), x.size(1) * tp.size(), x.size(2)}, local.options());
  tp.all_gather(local.data_ptr(), full.data_ptr(), local.nbytes(), "sequence parallel").wait();
  return full;
}

// x (B, T, C) partial sums → (B, T/t, C): this rank's tokens of their sum over tp, summed in
// fp32, returned in x's dtype.
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, Axis& tp) {
  const auto full = x.contiguous().to(torch::kFloat);
  auto mine = torch::empty({x.size(0), x.size(1) / tp.size(), x.size(2)}, full.options());
  tp.reduce_scatter_sum(full.data_ptr<float>(), mine.data_ptr<float>(), static_cast<std::size_t>(mine.numel()),
                        "sequence parallel").wait();
  return mine.to(x.scalar_type());
}

struct ReduceScatterSequence : torch::autograd::Function<ReduceScatterSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t axis) {
    ctx->saved_data["axis"] = axis;
    return reduce_scatter_sequence(x, axis_of(ctx));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_gather_sequence(g[0], axis_of(ctx)), torch::Tensor()};
  }
};

// Column-parallel linears on a sequence-parallel input (Megatron's LinearWithGradAccumulation-
// AndAsyncCommunication with sequence_parallel): forward all-gathers x's slice and applies each
// linear; only the slice is saved, and backward gathers it again for the weights' gradients.
// The compute dtype is autocast's at forward (or x's), cast explicitly: backward runs outside
// autocast. all: x, the weights, then as many biases or none.
struct SequenceParallelLinears : torch::autograd::Function<SequenceParallelLinears> {
  static variable_list forward(AutogradContext* ctx, at::TensorList all, std::int64_t linears, std::int64_t axis) {
    const auto& x = all[0];
    const auto type = x.device().type();
    const auto dtype = at::autocast::is_autocast_enabled(type) ? at::autocast::get_autocast_dtype(type) : x.scalar_type();
    ctx->saved_data["axis"] = axis;
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(dtype);
    const bool biased = static_cast<std::int64_t>(all.size()) > 1 + linears;
    ctx->saved_data["biased"] = biased;
    ctx->save_for_backward(variable_list(all.begin(), all.begin() + 1 + linears));  // x's slice, the weights
    const auto full = all_gather_sequence(x.to(dtype), axis_of(ctx));                 // (B, T, C)
    variable_list out;
    for (std::int64_t i = 0; i < linears; ++i)
      out.push_back(dense(full, all[1 + i].to(dtype), biased ? all[1 + linears + i].to(dtype) : torch::Tensor()));
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto& x = saved[0];
    auto full = all_gather_sequence(x.to(dtype), axis_of(ctx)).flatten(0, 1);  // (B·T, C)
    const auto linears = saved.size() - 1;
    const bool biased = ctx->saved_data["biased"].toBool();
    variable_list weights(linears), biases(biased ? linears : 0);
    torch::Tensor dx;  // (B·T, C)
    for (std::size_t i = 0; i < linears; ++i) {
      if (!g[i].defined()) continue;
      const auto& w = saved[1 + i];
      const auto gi = g[i].to(dtype).flatten(0, 1);  // (B·T, Nᵢ)
      const auto part = gemm(gi, w.to(dtype));
      dx = dx.defined() ? dx + part : part;
      weights[i] = gemm(gi.t(), full).to(w.scalar_type());
      if (biased) biases[i] = gi.sum(0).to(w.scalar_type());
    }
    full.reset();  // before the reduce-scatter: one whole-sequence tensor fewer at the peak
    variable_list out{reduce_scatter_sequence(dx.view({x.size(0), -1, x.size(2)}), axis_of(ctx)).to(x.scalar_type())};
    out.insert(out.end(), weights.begin(), weights.end());
    out.insert(out.end(), biases.begin(), biases.end());
    out.emplace_back(), out.emplace_back();  // linears, axis
    return out;
  }
};

// loss_n = log Σ_v exp(z_nv) − z_n,target with the max, the sum and the target logit each
// reduced over tp; backward is local: softmax − one-hot.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               std::int64_t start, std::int64_t valid, std::int64_t axis) {
    Axis& tp = axis_from(axis);
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

std::vector<torch::Tensor> TpRegion::column(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                            const std::vector<torch::Tensor>& biases) const {
  if (sp()) {
    variable_list all{x};
    all.insert(all.end(), weights.begin(), weights.end());
    all.insert(all.end(), biases.begin(), biases.end());
    return SequenceParallelLinears::apply(at::TensorList(all), static_cast<std::int64_t>(weights.size()), handle(*tp));
  }
  const auto in = copy_to(x);  // f
  auto bias = [&](std::size_t i) { return biases.empty() ? torch::Tensor() : biases[i]; };
  std::vector<torch::Tensor> out;
  for (std::size_t i = 0; i < weights.size(); ++i) out.push_back(dense(in, weights[i], bias(i)));
  return out;
}

torch::Tensor TpRegion::copy_to(const torch::Tensor& x) const {
  if (sp()) throw std::logic_error("TpRegion::copy_to: the input is whole on every tp rank only without sequence parallelism");
  return tp && tp->size() > 1 ? CopyToTp::apply(x, handle(*tp)) : x;
}

torch::Tensor TpRegion::row(const torch::Tensor& partial) const {
  if (!tp || tp->size() == 1) return partial;
  return sp() ? ReduceScatterSequence::apply(partial, handle(*tp)) : ReduceFromTp::apply(partial, handle(*tp));  // g
}

torch::Tensor TpRegion::replicated(const torch::Tensor& p) const {
  return sp() ? CopyToTp::apply(p, handle(*tp)) : p;
}

torch::Tensor TpRegion::positions(std::int64_t B, std::int64_t T, std::int64_t offset, const torch::TensorOptions& options) const {
  if (!sp()) return torch::arange(offset, offset + T, options);
  const auto n = B * T / tp->size();  // this rank's tokens: [rank·n, (rank + 1)·n) of the B·T
  return torch::arange(tp->rank() * n, (tp->rank() + 1) * n, options).remainder(T).view({B, T / tp->size()}) + offset;
}

torch::Tensor TpRegion::local_tokens(const torch::Tensor& t) const {
  if (!sp()) return t;
  const auto B = t.size(0), T = t.size(1), n = B * T / tp->size();
  return t.reshape({-1}).narrow(0, tp->rank() * n, n).view({B, T / tp->size()});
}

torch::Tensor vocab_parallel_embedding(const torch::Tensor& idx, const torch::Tensor& weight, std::int64_t start,
                                       const TpRegion& region) {
  if (!region.tp || region.tp->size() == 1) return torch::embedding(weight, idx);
  const auto outside = (idx < start) | (idx >= start + weight.size(0));
  auto e = torch::embedding(weight, (idx - start).masked_fill(outside, 0));
  return region.row(e.masked_fill(outside.unsqueeze(-1), 0.0));
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           std::int64_t start, std::int64_t valid, Axis& tp) {
  return VocabParallelCrossEntropy::apply(logits, targets, start, valid, handle(tp));
}

}  // namespace gridtrain
