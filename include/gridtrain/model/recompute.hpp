// Activation recomputation (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost";
// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"):
// a piece of the forward keeps only its inputs for backward and runs again, with autograd, when
// backward reaches it. LibTorch has no torch.utils.checkpoint; this is its non-reentrant form as
// a custom autograd function whose backward returns the gradients of the inputs and of the
// piece's parameters, so that they reach the parameters' accumulators (and the Reducer's and
// ZeRO stage 3's hooks on them) exactly as without recomputation.
#pragma once
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace gridtrain {

using Piece = std::function<torch::Tensor(const std::vector<torch::Tensor>& inputs)>;

/// piece(inputs), keeping for backward only `inputs` (and not piece's intermediate tensors).
/// params: the parameters piece reads (the gradients it gives them are returned to them). The
/// recompute runs under the autocast state of this call. piece must compute the same values
/// twice (no dropout here) and, where it communicates (tensor parallel), do so on every rank of
/// the group alike, which backward's fixed order keeps. Outside grad mode (validation,
/// decoding) piece(inputs), nothing kept.
torch::Tensor recomputed(const Piece& piece, const std::vector<torch::Tensor>& inputs,
                         const std::vector<torch::Tensor>& params = {});

}  // namespace gridtrain
