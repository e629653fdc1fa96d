#include "gridtrain/parallel/context_parallel.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "autograd_axis.hpp"

namespace gridtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// k (B, Hkv, N, D) → (B, H, N, D): each key/value head serves H / Hkv query heads.
torch::Tensor expand_heads(const torch::Tensor& k, std::int64_t H) { return k.repeat_interleave(H / k.size(1), 1); }

// g (B, H, N, D) → (B, Hkv, N, D): the gradient of expand_heads.
torch::Tensor reduce_heads(const torch::Tensor& g, std::int64_t Hkv) {
  return g.view({g.size(0), Hkv, g.size(1) / Hkv, g.size(2), g.size(3)}).sum(2);
}

// The probabilities P (B, H, Nq, Nk) of queries q over keys k (both fp32, H heads) where queries
// at positions pq may see keys at positions pk (causal), normalized by lse (B, H, Nq) given or
// computed (returned); a row with no visible key has P = 0 and lse = −inf.
std::pair<torch::Tensor, torch::Tensor> probabilities(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& pq, const torch::Tensor& pk, double scale,
                                                      torch::Tensor lse = {}) {
  const auto visible = pq.unsqueeze(1) >= pk.unsqueeze(0);  // (Nq, Nk)
  const auto s = (torch::matmul(q, k.transpose(-2, -1)) * scale).masked_fill(visible.logical_not(), kMinusInf);
  if (!lse.defined()) lse = s.logsumexp(-1);
  return {torch::exp(s - lse.unsqueeze(-1)).nan_to_num(0.0), lse};  // −inf − (−inf): a row without keys
}

// Query rows per tile of a block's attention: its scores (B, H, rows, Nk) fp32 stay near
// kRingTileElements (4 MiB), so that a block's transient memory does not grow as (T/cp)².
std::int64_t tile_rows(const torch::Tensor& q, std::int64_t keys) {
  return std::max<std::int64_t>(1, kRingTileElements / (q.size(0) * q.size(1) * keys));
}

// One ring step's exchange: sends `t` to the next cp rank and receives the previous one's.
class RingStep {
 public:
  RingStep(const torch::Tensor& t, Axis& cp, int tag) : outgoing_(t.contiguous()), incoming_(torch::empty_like(outgoing_)) {
    const int n = cp.size(), next = (cp.rank() + 1) % n, prev = (cp.rank() + n - 1) % n;
    recv_ = cp.recv(incoming_.data_ptr(), incoming_.nbytes(), prev, tag, "ring attention");
    send_ = cp.send(outgoing_.data_ptr(), outgoing_.nbytes(), next, tag, "ring attention");
  }
  torch::Tensor finish() {
    recv_.wait();
    send_.wait();
    return incoming_;
  }

 private:
  torch::Tensor outgoing_, incoming_;
  Work recv_, send_;
};

// Rank r holds, at ring step s, the key/value chunks of rank (r − s) mod cp.
int source_at(int step, const Axis& cp) { return (cp.rank() - step + cp.size()) % cp.size(); }

struct RingAttention : torch::autograd::Function<RingAttention> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, std::int64_t axis) {
    Axis& cp = axis_from(axis);
    const int n = cp.size();
    const std::int64_t H = q.size(1), T = q.size(2) * n;
    const auto qf = q.to(torch::kFloat), pq = context_positions(T, cp.rank(), n).to(q.device());
    auto kv = torch::stack({k, v}).to(torch::kFloat);  // (2, B, Hkv, 2S, D): what travels
    auto out = torch::zeros_like(qf);
    auto lse = torch::full({q.size(0), H, q.size(2)}, kMinusInf, qf.options());
    const std::int64_t N = q.size(2), rows = tile_rows(q, N);
    for (int s = 0; s < n; ++s) {
      std::optional<RingStep> next;
      if (s + 1 < n) next.emplace(kv, cp, s);  // the next chunks arrive while this one computes
      const auto pk = context_positions(T, source_at(s, cp), n).to(q.device());
      const auto keys = expand_heads(kv[0], H), values = expand_heads(kv[1], H);
      for (std::int64_t i = 0; i < N; i += rows) {  // a tile of queries (B, H, r, D)
        const auto r = std::min(rows, N - i);
        auto o = out.narrow(2, i, r), l = lse.narrow(2, i, r);
        const auto [p, block_lse] = probabilities(qf.narrow(2, i, r), keys, pq.narrow(0, i, r), pk, scale);
        merge_attention(o, l, torch::matmul(p, values), block_lse);  // o in place; l a new tensor
        lse.narrow(2, i, r).copy_(l);
      }
      if (next) kv = next->finish();
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["axis"] = axis;
    return out.to(q.scalar_type());
  }

  // Flash attention's backward per block (Dao et al. 2022, Alg. 4) with the final lse: P, then
  // dV = Pᵀ dO, dS = P ⊙ (dO Vᵀ − Δ), Δ = rowsum(dO ⊙ O), dQ = dS K·scale, dK = dSᵀ Q·scale.
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble();
    Axis& cp = axis_of(ctx);
    const int n = cp.size();
    const std::int64_t H = q.size(1), Hkv = k.size(1), T = q.size(2) * n;
    const auto qf = q.to(torch::kFloat), dout = g[0].to(torch::kFloat), pq = context_positions(T, cp.rank(), n).to(q.device());
    const auto delta = (dout * out).sum(-1, /*keepdim=*/true);  // (B, H, 2S, 1)
    auto dq = torch::zeros_like(qf);
    auto kv = torch::stack({k, v}).to(torch::kFloat);
    auto dkv = torch::zeros_like(kv);  // travels with its chunks, and home after the last step
    const std::int64_t N = q.size(2), rows = tile_rows(q, N);
    for (int s = 0; s < n; ++s) {
      std::optional<RingStep> next;
      if (s + 1 < n) next.emplace(kv, cp, 2 * s);
      const auto keys = expand_heads(kv[0], H), values = expand_heads(kv[1], H);
      const auto pk = context_positions(T, source_at(s, cp), n).to(q.device());
      auto dk = torch::zeros_like(keys), dv = torch::zeros_like(values);  // (B, H, 2S, D), summed over the tiles
      for (std::int64_t i = 0; i < N; i += rows) {
        const auto r = std::min(rows, N - i);
        const auto qt = qf.narrow(2, i, r), dot = dout.narrow(2, i, r);
        const auto p = probabilities(qt, keys, pq.narrow(0, i, r), pk, scale, lse.narrow(2, i, r)).first;
        const auto ds = p * (torch::matmul(dot, values.transpose(-2, -1)) - delta.narrow(2, i, r));
        dq.narrow(2, i, r) += torch::matmul(ds, keys) * scale;
        dk += torch::matmul(ds.transpose(-2, -1), qt) * scale;
        dv += torch::matmul(p.transpose(-2, -1), dot);
      }
      dkv += torch::stack({reduce_heads(dk, Hkv), reduce_heads(dv, Hkv)});
      if (n > 1) dkv = RingStep(dkv, cp, 2 * s + 1).finish();  // on to the next holder of these chunks
      if (next) kv = next->finish();
    }
    return {dq.to(q.scalar_type()), dkv[0].to(k.scalar_type()), dkv[1].to(v.scalar_type()), torch::Tensor(),
            torch::Tensor()};
  }
};

// k and v stacked, (2, B, Hkv, 2·S, D), gathered over cp in rank order: (cp, 2, B, Hkv, 2·S, D).
struct AllGatherKv : torch::autograd::Function<AllGatherKv> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& kv, std::int64_t axis) {
    ctx->saved_data["axis"] = axis;
    Axis& cp = axis_from(axis);
    const auto mine = kv.contiguous();
    std::vector<std::int64_t> shape = {cp.size()};
    shape.insert(shape.end(), mine.sizes().begin(), mine.sizes().end());
    auto all = torch::empty(shape, mine.options());
    cp.all_gather(mine.data_ptr(), all.data_ptr(), mine.nbytes(), "context parallel keys and values").wait();
    return all;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Axis& cp = axis_of(ctx);
    const auto all = g[0].contiguous().to(torch::kFloat);
    auto mine = torch::empty(all.sizes().slice(1), all.options());
    cp.reduce_scatter_sum(all.data_ptr<float>(), mine.data_ptr<float>(), static_cast<std::size_t>(mine.numel()),
                          "context parallel key/value gradients").wait();
    return {mine.to(g[0].scalar_type()), torch::Tensor()};
  }
};

// x summed over the axis, out of place, fp32.
torch::Tensor summed(const torch::Tensor& x, Axis& cp, const char* label) {
  auto y = x.to(torch::kFloat).contiguous().clone();
  cp.allreduce_sum(y.data_ptr<float>(), static_cast<std::size_t>(y.numel()), label).wait();
  return y;
}

struct SumOverContext : torch::autograd::Function<SumOverContext> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t axis) {
    ctx->saved_data["axis"] = axis;
    return summed(x, axis_from(axis), "context parallel sums");
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {summed(g[0], axis_of(ctx), "context parallel sums' gradient"), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor sum_over_context(const torch::Tensor& x, Axis& cp) { return SumOverContext::apply(x, axis_handle(cp)); }

torch::Tensor context_positions(std::int64_t T, int rank, int cp) {
  const std::int64_t S = T / (2 * cp);
  return torch::cat({torch::arange(rank * S, (rank + 1) * S), torch::arange((2 * cp - 1 - rank) * S, (2 * cp - rank) * S)});
}

void merge_attention(torch::Tensor& out, torch::Tensor& lse, const torch::Tensor& block_out,
                     const torch::Tensor& block_lse) {
  // σ(lse_b − lse) = exp(lse_b − logaddexp(lse, lse_b)): the block's share of the merged softmax;
  // NaN only where both are −inf, a row no key reaches yet, whose out stays 0.
  const auto share = torch::sigmoid(block_lse - lse).nan_to_num(0.0).unsqueeze(-1);
  out -= share * (out - block_out);
  lse = torch::logaddexp(lse, block_lse);  // lse − log σ(lse − lse_b), finite or −inf
}

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                             Axis& cp) {
  return RingAttention::apply(q, k, v, scale, axis_handle(cp));
}

std::pair<torch::Tensor, torch::Tensor> all_gather_kv(const torch::Tensor& k, const torch::Tensor& v, Axis& cp) {
  const int n = cp.size();
  const std::int64_t T = k.size(2) * n;
  const auto all = AllGatherKv::apply(torch::stack({k, v}), axis_handle(cp));  // (cp, 2, B, Hkv, 2S, D)
  std::vector<torch::Tensor> held;  // the positions of the gathered tokens, rank after rank
  for (int r = 0; r < n; ++r) held.push_back(context_positions(T, r, n));
  const auto order = torch::argsort(torch::cat(held)).to(k.device());  // gathered index of position t
  const auto kv = all.permute({1, 2, 3, 0, 4, 5}).reshape({2, k.size(0), k.size(1), T, k.size(3)}).index_select(3, order);
  return {kv[0], kv[1]};
}

torch::Tensor CpRegion::local(const torch::Tensor& t) const {
  if (!cp) return t;
  return t.index_select(1, context_positions(t.size(1), cp->rank(), cp->size()).to(t.device()));
}

torch::Tensor CpRegion::positions(std::int64_t B, std::int64_t T, const torch::Device& device) const {
  if (!cp) return {};
  return context_positions(T, cp->rank(), cp->size()).to(device).unsqueeze(0).expand({B, -1});
}

torch::Tensor CpRegion::causal_mask(std::int64_t T, const torch::Device& device) const {
  const auto query = context_positions(T, cp->rank(), cp->size()).to(device);
  return (torch::arange(T, query.options()).unsqueeze(0) <= query.unsqueeze(1)).view({1, 1, -1, T});
}

}  // namespace gridtrain
