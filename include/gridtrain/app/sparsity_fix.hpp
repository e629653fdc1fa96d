// Dynamic sparse training (sparse/sparse_training.hpp) as a step fix (app/fix.hpp): the masks
// are applied to the gradients after the exchange and to the weights after each update, saved as
// checkpoint group "sparse", and reported as the thermo line's Sparse% column, metrics.jsonl's and
// TensorBoard's sparsity and FLOPs figures and the summary's "Sparsity" section.
#pragma once
#include "gridtrain/app/fix.hpp"
#include "gridtrain/sparse/sparse_training.hpp"

namespace gridtrain {

class SparsityFix final : public Fix {
 public:
  /// sparsity.method != none. Collective over ctx.grid.world(). Throws what SparseTraining throws.
  explicit SparsityFix(const FixContext& ctx);
  /// sparsity.method = none: a checkpoint's masks are unused, which the resume message says.
  static void ignore_masks(Checkpointer& checkpointer);

  SparseTraining& training() { return training_; }
  void describe(Log& log) const override;
  void after_exchange(long long s, const std::vector<torch::Tensor>& grads) override;
  void after_update(long long s) override;
  void columns(std::vector<ReportColumn>& out) override;
  void summary(std::vector<ReportSection>& out, const std::string& item) override;
  double state_bytes() const override;

 private:
  SparseTraining training_;
};

}  // namespace gridtrain
