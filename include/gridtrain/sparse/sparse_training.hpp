// Dynamic sparse training (sparsity.method = gmp | set | rigl): a 0/1 mask per sparsified
// parameter, kept over the pieces the optimizer updates (the whole tp-local tensor, its ZeRO piece,
// or its fp32 master), applied to the gradients before the update and to the weights after it.
// Methods and schedules: sparse/schedule.hpp. Every mask is a function of the global tensor
// (sparse/top_k.hpp), so each (dp, tp, pp, ZeRO stage) layout makes the masks one rank makes.
//
// A step s (0-based) with sparsity:
//   mask_gradients   after the gradient exchange, before the norm and clipping: at a RigL mask
//                    update, the dense |gradient| is kept as the regrowth score; then g ← g ⊙ m.
//   (the optimizer updates the weights)
//   after_update     at a mask update: drop the smallest-|w| active weights, regrow (set: at
//                    random from (train.seed, s, name, global index); rigl: by the kept score)
//                    among the rest, zero the dropped and regrown weights and their optimizer
//                    state; then w ← w ⊙ m.
// A skipped step calls neither after_update nor changes a mask. Checkpoints save the masks as
// /sparse/<param>/mask (fp32 0/1, the parameter's global shape); the schedule is a function of the
// step alone.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gridtrain/config/config.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/model/model.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/sparse/schedule.hpp"
#include "gridtrain/sparse/sparsity_report.hpp"

namespace gridtrain {

class SparseTraining {
 public:
  /// pieces: the optimizer's parameters in the model's parameter order, fp32 (whole tp-local
  /// tensors, or ZeRO pieces: flat views with shape and offset), each rank's pieces disjoint over
  /// dp when pieces_split_over_dp (ZeRO >= 1), else replicas. opt: the optimizer over them, whose
  /// state of masked entries is zeroed. Collective over grid.world() (every stage's tensors decide
  /// the erk densities). Throws gridtrain::Error when no parameter of the model is of a class in
  /// sparsity.tensors.
  SparseTraining(const Config& cfg, const Model& model, const std::vector<NamedParameter>& pieces, Optimizer& opt,
                 Grid& grid, bool pieces_split_over_dp);

  /// The masks as checkpoint state: "<param>/mask", fp32 0/1, shaped and placed as the pieces.
  const std::vector<NamedParameter>& masks() const { return masks_; }
  /// After the gradient exchange of step s: grads[i] is pieces[i]'s gradient (any float dtype).
  void mask_gradients(long long s, const std::vector<torch::Tensor>& grads);
  /// After the optimizer's update of step s (not called for a skipped step).
  void after_update(long long s);
  /// The report at the current masks. Collective over grid.world().
  SparsityReport report();
  /// One line for the setup report: method, target, distribution, schedule, tensors.
  std::string describe() const;
  /// Why the masks stay dense for the whole run (sparsity.target = 0, or the first mask update
  /// after train.steps), naming the keys; "" when the run prunes. For a warning at setup.
  std::string never_prunes() const;

 private:
  struct Global {  // a parameter of the whole model (any stage)
    std::string name;
    TensorClass cls;
    std::int64_t numel;      // global elements (padding excluded)
    double flops;            // Model::weight_flops_per_item
    double density = 1.0;    // final density; 1 for a tensor not sparsified
    bool sparsified = false;
  };
  struct Local {  // a sparsified parameter on this rank
    std::size_t piece;    // index in the pieces (and gradients)
    std::size_t global;   // index in global_
    ShardSpec spec;
    NamedParameter weight;
    torch::Tensor mask = {};   // shaped as weight.param, fp32 0/1
    std::vector<torch::Tensor> state = {};  // the optimizer's state of this parameter (as the piece)
    torch::Tensor score = {};  // rigl: |dense gradient| keys of the step's mask update
    bool counted = false;      // this rank's counts add to the tensor's totals
  };
  void update_masks(long long s);
  /// Whether step s is a RigL update that regrows by the dense gradient (start < s < end).
  bool regrowing(long long s) const;
  /// Training FLOPs per item of the sparsified products (all stages) in step s, which runs with the
  /// masks of step s - 1's update, its RigL dense gradient included.
  double layer_flops(long long s) const;
  torch::Tensor global_index(const Local& t) const;

  const Config& cfg_;
  Grid& grid_;
  bool split_over_dp_;
  SparsitySchedule schedule_;
  std::vector<Global> global_;  // sorted by name
  std::vector<Local> local_;
  std::vector<NamedParameter> masks_;
  double dense_flops_ = 0;        // the whole model's, per item
  double layer_dense_flops_ = 0;  // the sparsified tensors' products, dense, per item
  long long last_step_ = -1;  // the last step after_update saw (the report is of the masks it left)
  double flops_sum_ = 0, layer_flops_sum_ = 0;
  long long flops_steps_ = 0;
};

}  // namespace gridtrain
