// fp32 master weights for 2-byte parameters (precision.weights = bf16 | fp16): Micikevicius et al.
// 2018, "Mixed Precision Training", with the master copy sharded like the optimizer state at
// ZeRO stages 1-3 (Rajbhandari et al. 2020, §3: 2Ψ parameters + 2Ψ gradients + 12Ψ for Adam's
// fp32 master, momentum and variance).
//
// The optimizer updates an fp32 copy of each parameter (under ZeRO, of this rank's piece of it),
// and after each update the 2-byte parameter is the copy rounded to nearest even. For the update
// the 2-byte gradient is widened to fp32 and the step's unscale-and-clip factor is applied there,
// in fp32 (an fp16 gradient unscaled in 2 bytes would underflow). Checkpoints store and load the
// masters as the parameters, so a file is the same as an fp32 run's and resumes bit-exactly.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/optim/optimizer.hpp"

namespace gridtrain {

class MasterWeights {
 public:
  /// pieces: the 2-byte parameters as the optimizer would update them (whole, or ZeRO pieces:
  /// flat views with shape and offset), each with its .grad; initial: every parameter's fp32
  /// value, whole (the tp-local tensor), in the same order, from which each master is copied.
  /// Throws std::invalid_argument when the two lists differ in length or a piece lies outside
  /// its tensor.
  MasterWeights(std::vector<NamedParameter> pieces, const std::vector<torch::Tensor>& initial);

  /// The fp32 masters, named, shaped and placed as the pieces: what the optimizer updates and
  /// what checkpoints save and load.
  const std::vector<NamedParameter>& masters() const { return masters_; }
  /// Sets every master's .grad to its piece's gradient in fp32 multiplied by factor.
  void load_gradients(double factor);
  /// Frees the fp32 gradients and rounds every master into its 2-byte piece (after an update,
  /// and after a checkpoint was loaded into the masters).
  void publish();
  /// Bytes of the masters on this rank.
  std::uint64_t bytes() const;

 private:
  std::vector<NamedParameter> pieces_, masters_;
};

}  // namespace gridtrain
