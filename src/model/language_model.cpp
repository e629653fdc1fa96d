#include "gridtrain/model/language_model.hpp"

#include "gridtrain/parallel/tensor_parallel.hpp"
#include "gridtrain/util/hash.hpp"

namespace gridtrain::lm {

std::pair<torch::Tensor, torch::Tensor> split_windows(const torch::Tensor& rows, std::int64_t T) {
  return {rows.slice(1, 0, T), rows.slice(1, 1, T + 1)};
}

torch::Tensor embed(const torch::Tensor& idx, const torch::Tensor& weight, Axis* tp) {
  if (!tp) return torch::embedding(weight, idx);
  return vocab_parallel_embedding(idx, weight, tp->rank() * weight.size(0), *tp);
}

torch::Tensor head_loss(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& targets,
                        const ShardSpec& spec, Axis* tp) {
  const auto flat_targets = targets.reshape({-1});
  const auto rows = weight.size(0);
  if (!tp) {
    auto logits = torch::nn::functional::linear(x, weight).view({-1, rows}).to(torch::kFloat);
    return torch::nn::functional::cross_entropy(
        logits, flat_targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  }
  auto logits = torch::nn::functional::linear(copy_to_tp(x, *tp), weight).view({-1, rows});  // (B·T, V/tp)
  return vocab_parallel_cross_entropy(logits, flat_targets, tp->rank() * rows,
                                      valid_rows(spec, tp->rank(), tp->size()), *tp);
}

void initialize(torch::nn::Module& m, const std::function<ShardSpec(const std::string&)>& spec, int tp_rank,
                int tp_size, std::uint64_t seed, const Fill& fill) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.named_parameters(/*recurse=*/true)) {
    const std::string& name = p.key();
    const ShardSpec s = spec(name);
    auto full = torch::empty(s.global_shape, p.value().options());
    auto gen = at::detail::createCPUGenerator(splitmix64(seed ^ fnv1a(name)));
    fill(name, full, gen);
    p.value().copy_(take_shard(full, s, tp_rank, tp_size));
  }
}

std::int64_t local_elements(const std::vector<std::string>& names,
                            const std::function<ShardSpec(const std::string&)>& spec, int tp_size) {
  std::int64_t n = 0;
  for (const auto& name : names) {
    std::int64_t elements = 1;
    for (auto d : local_shape(spec(name), tp_size)) elements *= d;
    n += elements;
  }
  return n;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace gridtrain::lm
