#include "gridtrain/sparse/top_k.hpp"

#include <algorithm>
#include <limits>

#include "gridtrain/util/hash.hpp"

namespace gridtrain {
namespace {

// Σ over ranks of pred(j) for each part j not yet settled (the others count 0).
std::vector<double> count(const std::vector<TopKPart>& parts, const std::vector<bool>& open, const CountSum& sum,
                          const std::function<torch::Tensor(std::size_t)>& pred) {
  std::vector<double> c(parts.size(), 0.0);
  for (std::size_t j = 0; j < parts.size(); ++j)
    if (open[j] && parts[j].counted && parts[j].key.numel() > 0) c[j] = static_cast<double>(pred(j).sum().item<std::int64_t>());
  sum(c);
  return c;
}

}  // namespace

std::vector<torch::Tensor> select_top_k(const std::vector<TopKPart>& parts, const CountSum& sum) {
  const std::size_t n = parts.size();
  std::vector<bool> open(n, true);
  const auto candidates = count(parts, open, sum, [&](std::size_t j) { return parts[j].key.ge(0); });
  std::vector<std::int64_t> k(n), lo(n, 0), hi(n, std::numeric_limits<std::int32_t>::max());
  for (std::size_t j = 0; j < n; ++j) {
    k[j] = std::min<std::int64_t>(parts[j].k, static_cast<std::int64_t>(candidates[j]));
    open[j] = k[j] > 0;
  }
  const std::vector<bool> selecting = open;
  // The threshold t: the largest key value with at least k keys >= t.
  for (auto busy = selecting;;) {
    std::vector<std::int64_t> mid(n);
    for (std::size_t j = 0; j < n; ++j) busy[j] = selecting[j] && lo[j] < hi[j], mid[j] = lo[j] + (hi[j] - lo[j] + 1) / 2;
    if (std::none_of(busy.begin(), busy.end(), [](bool b) { return b; })) break;
    const auto c = count(parts, busy, sum, [&](std::size_t j) { return parts[j].key.ge(mid[j]); });
    for (std::size_t j = 0; j < n; ++j) {
      if (!busy[j]) continue;
      if (c[j] >= static_cast<double>(k[j])) lo[j] = mid[j];
      else hi[j] = mid[j] - 1;
    }
  }
  const std::vector<std::int64_t> t = lo;
  const auto above = count(parts, selecting, sum, [&](std::size_t j) { return parts[j].key.gt(t[j]); });
  // Of the keys equal to t, the `need` with the smallest global indices: the least m with
  // `need` of them below m.
  std::vector<std::int64_t> need(n), m_lo(n, 1), m_hi(n);
  for (std::size_t j = 0; j < n; ++j) need[j] = k[j] - static_cast<std::int64_t>(above[j]), m_hi[j] = parts[j].numel;
  for (auto busy = selecting;;) {
    std::vector<std::int64_t> mid(n);
    for (std::size_t j = 0; j < n; ++j) busy[j] = selecting[j] && m_lo[j] < m_hi[j], mid[j] = (m_lo[j] + m_hi[j]) / 2;
    if (std::none_of(busy.begin(), busy.end(), [](bool b) { return b; })) break;
    const auto c = count(parts, busy, sum,
                         [&](std::size_t j) { return parts[j].key.eq(t[j]).logical_and(parts[j].index.lt(mid[j])); });
    for (std::size_t j = 0; j < n; ++j) {
      if (!busy[j]) continue;
      if (c[j] >= static_cast<double>(need[j])) m_hi[j] = mid[j];
      else m_lo[j] = mid[j] + 1;
    }
  }
  std::vector<torch::Tensor> out;
  for (std::size_t j = 0; j < n; ++j) {
    const auto& p = parts[j];
    out.push_back(selecting[j] ? p.key.gt(t[j]).logical_or(p.key.eq(t[j]).logical_and(p.index.lt(m_hi[j])))
                               : torch::zeros_like(p.key, torch::kBool));
  }
  return out;
}

torch::Tensor magnitude_key(const torch::Tensor& x) {
  return x.detach().reshape(-1).to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true).abs_().view(torch::kInt);
}

torch::Tensor random_key(std::uint64_t seed, long long step, const std::string& name, const torch::Tensor& index) {
  const auto host = index.to(torch::kCPU).contiguous();
  auto out = torch::empty({host.numel()}, torch::kInt);
  const std::uint64_t base = splitmix64(splitmix64(seed ^ fnv1a(name)) ^ static_cast<std::uint64_t>(step));
  const auto* in = host.data_ptr<std::int64_t>();
  auto* key = out.data_ptr<std::int32_t>();
  for (std::int64_t i = 0; i < host.numel(); ++i)
    key[i] = static_cast<std::int32_t>(splitmix64(base ^ static_cast<std::uint64_t>(in[i])) >> 33);
  return out.to(index.device());
}

}  // namespace gridtrain
