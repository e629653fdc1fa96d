// SGD with momentum.
#pragma once
#include <vector>

#include "gridtrain/optim/optimizer.hpp"

namespace gridtrain {

/// SGD with heavy-ball momentum as torch.optim.SGD (dampening 0): g ← g + wd·p (>= 2-D only);
/// b ← μ b + g; p ← p − lr·b.
class Sgd : public Optimizer {
 public:
  Sgd(std::vector<NamedParameter> params, double momentum, double weight_decay);
  void step(double lr) override;
  OptimizerType type() const override { return OptimizerType::Sgd; }
  std::vector<NamedParameter> state() override;

 private:
  struct Slot {
    NamedParameter p;
    torch::Tensor momentum_buffer;
    bool decay;
  };
  std::vector<Slot> slots_;
  double momentum_, wd_;
};

}  // namespace gridtrain
