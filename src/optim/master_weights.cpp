#include "gridtrain/optim/master_weights.hpp"

#include <stdexcept>

namespace gridtrain {

MasterWeights::MasterWeights(std::vector<NamedParameter> pieces, const std::vector<torch::Tensor>& initial)
    : pieces_(std::move(pieces)) {
  if (pieces_.size() != initial.size())
    throw std::invalid_argument("MasterWeights: " + std::to_string(pieces_.size()) + " parameters but " +
                                std::to_string(initial.size()) + " initial values");
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const NamedParameter& p = pieces_[i];
    const auto whole = initial[i].detach().to(torch::kFloat);
    if (p.offset < 0 || p.offset + p.param.numel() > whole.numel())
      throw std::invalid_argument("MasterWeights: the piece of " + p.name + " lies outside its tensor");
    // A piece: its elements of the flattened tensor; whole: a copy of its own.
    auto master = p.shape.empty() ? whole.clone() : whole.reshape(-1).narrow(0, p.offset, p.param.numel()).clone();
    masters_.push_back({p.name, std::move(master), p.shape, p.offset});
  }
}

void MasterWeights::load_gradients(double factor) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    auto g = pieces_[i].param.grad().to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
    if (factor != 1.0) g.mul_(factor);
    masters_[i].param.mutable_grad() = std::move(g);
  }
}

void MasterWeights::publish() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    masters_[i].param.mutable_grad().reset();
    pieces_[i].param.copy_(masters_[i].param);
  }
}

std::uint64_t MasterWeights::bytes() const {
  std::uint64_t n = 0;
  for (const auto& m : masters_) n += m.param.nbytes();
  return n;
}

}  // namespace gridtrain
