#include "gridtrain/parallel/expert_parallel.hpp"

#include <numeric>
#include <stdexcept>
#include <string>

#include "autograd_axis.hpp"

namespace gridtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// rows (n, C) → (Σ recv, C), in rows' dtype and device.
torch::Tensor exchange(const torch::Tensor& rows, const std::vector<std::int64_t>& send,
                       const std::vector<std::int64_t>& recv, Axis& ep) {
  const auto in = rows.contiguous();
  auto out = torch::empty({std::accumulate(recv.begin(), recv.end(), std::int64_t{0}), in.size(1)}, in.options());
  ep.all_to_all_v(in.data_ptr(), send, out.data_ptr(), recv, static_cast<std::size_t>(in.size(1) * in.element_size()),
                  "token dispatch").wait();
  return out;
}

struct AllToAllRows : torch::autograd::Function<AllToAllRows> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& rows, std::vector<std::int64_t> send,
                               std::vector<std::int64_t> recv, std::int64_t axis) {
    ctx->saved_data["axis"] = axis;
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return exchange(rows, send, recv, axis_from(axis));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {  // the rows go back where they came from
    return {exchange(g[0], ctx->saved_data["recv"].toIntVector(), ctx->saved_data["send"].toIntVector(), axis_of(ctx)),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The inverse of permutation p (int64, on p's device).
torch::Tensor inverse_permutation(const torch::Tensor& p) {
  return torch::empty_like(p).scatter_(0, p, torch::arange(p.numel(), p.options()));
}

}  // namespace

torch::Tensor all_to_all_rows(const torch::Tensor& rows, const std::vector<std::int64_t>& send_rows,
                              const std::vector<std::int64_t>& recv_rows, Axis& ep) {
  return AllToAllRows::apply(rows, send_rows, recv_rows, axis_handle(ep));
}

TokenDispatch::TokenDispatch(const torch::Tensor& chosen, std::int64_t experts, const EpRegion& region)
    : region_(region), tokens_(chosen.size(0)), top_k_(chosen.size(1)) {
  const int ep = region.size();
  if (experts % ep != 0)
    throw std::invalid_argument("TokenDispatch: " + std::to_string(experts) + " experts do not split over " +
                                std::to_string(ep) + " expert-parallel ranks");
  const auto slots = chosen.reshape({-1});  // (N·k,) token n's slots at n·k .. n·k + k − 1
  order_ = std::get<1>(slots.sort(/*stable=*/std::optional<bool>(true), 0));
  unorder_ = inverse_permutation(order_);
  const auto counts = torch::bincount(slots, {}, experts + 1).cpu();  // (E + 1,) slots per global expert, dropped
  const std::vector<std::int64_t> per_expert(counts.data_ptr<std::int64_t>(), counts.data_ptr<std::int64_t>() + experts);
  dropped_ = counts.data_ptr<std::int64_t>()[experts];
  const std::int64_t local = region.local(experts);
  if (ep == 1) {
    expert_rows_ = per_expert;
    return;
  }
  // from[r·local + j]: rows rank r sends to this rank's expert j.
  std::vector<std::int64_t> from(per_expert.size());
  region.ep->blocking_all_to_all(per_expert.data(), from.data(), static_cast<int>(local), "token counts");
  send_.assign(ep, 0), recv_.assign(ep, 0), expert_rows_.assign(local, 0);
  for (int r = 0; r < ep; ++r)
    for (std::int64_t j = 0; j < local; ++j) {
      send_[r] += per_expert[r * local + j];
      recv_[r] += from[r * local + j];
      expert_rows_[j] += from[r * local + j];
    }
  // Received rows are source-major (rank r's block, inside it expert-major): gather expert-major.
  std::vector<std::int64_t> permute;
  permute.reserve(static_cast<std::size_t>(std::accumulate(recv_.begin(), recv_.end(), std::int64_t{0})));
  for (std::int64_t j = 0; j < local; ++j) {
    std::int64_t block = 0;  // where rank r's block starts
    for (int r = 0; r < ep; ++r) {
      const std::int64_t start = block + std::accumulate(from.begin() + r * local, from.begin() + r * local + j, std::int64_t{0});
      for (std::int64_t i = 0; i < from[r * local + j]; ++i) permute.push_back(start + i);
      block += recv_[r];
    }
  }
  permute_ = torch::tensor(permute, torch::kInt64).to(chosen.device());
  unpermute_ = inverse_permutation(permute_);
}

torch::Tensor TokenDispatch::dispatch(const torch::Tensor& x) const {
  // Each token's k copies (expand: its gradient is a fixed-order sum), in global-expert order.
  const auto kept = order_.narrow(0, 0, order_.numel() - dropped_);
  const auto rows = x.unsqueeze(1).expand({tokens_, top_k_, x.size(1)}).reshape({-1, x.size(1)}).index_select(0, kept);
  if (region_.size() == 1) return rows;
  return all_to_all_rows(rows, send_, recv_, *region_.ep).index_select(0, permute_);
}

torch::Tensor TokenDispatch::combine(const torch::Tensor& y, const torch::Tensor& weights) const {
  auto back = region_.size() == 1 ? y : all_to_all_rows(y.index_select(0, unpermute_), recv_, send_, *region_.ep);
  if (dropped_ > 0) back = torch::cat({back, torch::zeros({dropped_, y.size(1)}, back.options())});
  const auto slots = back.index_select(0, unorder_).to(torch::kFloat).view({tokens_, top_k_, y.size(1)});  // (N, k, C)
  return (slots * weights.to(torch::kFloat).unsqueeze(-1)).sum(1);
}

}  // namespace gridtrain
