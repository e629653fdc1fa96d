// What dynamic sparse training reports at a thermo line and at the end of the run (thermo,
// metrics.jsonl, TensorBoard, the summary), counted from the masks themselves.
//
// FLOPs are training FLOPs per item (token; image) counted as Evci et al. 2020 count them (their
// Appendix H): a sparsified tensor of density d costs d times its dense forward and backward, and
// at a RigL mask update its weight gradient is dense (2 f_S + f_D for that step instead of 3 f_S).
// These are the FLOPs a sparse kernel would need; gridtrain runs dense kernels on masked
// weights, so its step time and MFU are those of the dense model (docs/sparsity.md).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace gridtrain {

struct SparsityReport {
  double sparsified = 0;  ///< fraction of zeros (masked entries) over the sparsified tensors
  double model = 0;       ///< fraction of zeros over all of the model's parameters
  /// Per tensor class of the model ("matrix", "conv", ...): fraction of zeros over its parameters.
  std::vector<std::pair<std::string, double>> by_class;
  double flops_per_item = 0;        ///< whole model at the current masks (RigL's update cost amortised)
  double dense_flops_per_item = 0;  ///< whole model, dense (ModelPlan::flops_per_item)
  double layer_flops_per_item = 0;  ///< the sparsified tensors' products only, at the current masks
  double layer_dense_flops_per_item = 0;  ///< the same products, dense
  /// Over the steps of this run so far, the mean training FLOPs per item of the whole model and
  /// of the sparsified tensors' products, each step counted at its own masks.
  double mean_flops_per_item = 0, mean_layer_flops_per_item = 0;
};

}  // namespace gridtrain
