#include "gridtrain/optim/parameter_stack.hpp"

namespace gridtrain {

void ParameterStack::load_gradients(double factor) {
  if (masters_) masters_->load_gradients(factor);  // unscaled and clipped in fp32
  else if (factor != 1.0) reducer_.scale(factor);  // unscale and clip in one pass
}

void ParameterStack::publish() {
  if (masters_) masters_->publish();
  parameters_.all_gather();  // ZeRO stages 1-2: every rank's pieces to every rank
}

}  // namespace gridtrain
