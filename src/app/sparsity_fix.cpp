#include "gridtrain/app/sparsity_fix.hpp"

#include "gridtrain/util/log.hpp"

namespace gridtrain {

SparsityFix::SparsityFix(const FixContext& ctx)
    : training_(ctx.cfg, ctx.model, ctx.pieces, ctx.optimizer, ctx.grid, ctx.pieces_split_over_dp) {
  ctx.checkpointer.add_state("sparse", training_.masks(),
                             "has no sparsity masks (/sparse): it was written with sparsity.method = none; start "
                             "sparse training from its weights with checkpoint.init_from (a fresh optimizer), or "
                             "resume with sparsity.method = none");
}

void SparsityFix::ignore_masks(Checkpointer& checkpointer) {
  checkpointer.ignore_state("sparse", "its sparsity masks are not used (sparsity.method = none): pruned weights may "
                                      "grow back");
}

void SparsityFix::describe(Log& log) const {
  log.print(training_.describe());
  if (const std::string never = training_.never_prunes(); !never.empty()) log.warn(never);
}

// Before the norm: clipping sees the gradient the update applies.
void SparsityFix::after_exchange(long long s, const std::vector<torch::Tensor>& grads) {
  training_.mask_gradients(s, grads);
}

// Host work: a mask update counts on the host.
void SparsityFix::after_update(long long s) { training_.after_update(s); }

void SparsityFix::columns(std::vector<ReportColumn>& out) {
  const SparsityReport r = training_.report();
  out.push_back({"sparsity", r.sparsified, "sparsity/sparsified", "Sparse%", 100.0 * r.sparsified});
  out.push_back({"sparsity_model", r.model, "sparsity/model"});
  for (const auto& [name, zeros] : r.by_class) out.push_back({"sparsity_" + name, zeros, "sparsity/" + name});
  out.push_back({"flops_per_item", r.flops_per_item, "flops/per_item"});
  out.push_back({"dense_flops_per_item", r.dense_flops_per_item, "flops/dense_per_item"});
  out.push_back({"layer_flops_per_item", r.layer_flops_per_item});
  out.push_back({"layer_dense_flops_per_item", r.layer_dense_flops_per_item});
}

// The masks' zeros, and the training FLOPs a sparse kernel would need against the dense ones that
// ran; summary.json's "sparsity" object.
void SparsityFix::summary(std::vector<ReportSection>& out, const std::string& item) {
  const SparsityReport r = training_.report();
  auto pct = [](double x) { return fmt("%.2f", 100.0 * x) + " %"; };
  std::string classes, json_classes;
  for (const auto& [name, zeros] : r.by_class) {
    classes += (classes.empty() ? "" : ", ") + name + " " + pct(zeros);
    json_classes += (json_classes.empty() ? "" : ", ") + ("\"" + name + "\": ") + fmt("%.9g", zeros);
  }
  const std::string text =
      "\nSparsity: " + pct(r.sparsified) + " zeros in the sparsified tensors, " + pct(r.model) +
      " of all parameters (by class: " + classes + ")\n" + "Training FLOPs per " + item +
      " as Evci et al. 2020 count them: " + fmt("%.4g", r.mean_flops_per_item) + " mean over the run's steps, " +
      fmt("%.4g", r.flops_per_item) + " at the final masks, dense " + fmt("%.4g", r.dense_flops_per_item) +
      "; in the sparsified tensors' products " + fmt("%.4g", r.mean_layer_flops_per_item) + " mean, " +
      pct(1.0 - r.mean_layer_flops_per_item / r.layer_dense_flops_per_item) + " fewer than dense (" +
      fmt("%.4g", r.layer_dense_flops_per_item) + "). The step time and MFU above are the dense kernels' that "
      "ran (MFU against dense FLOPs): masked weights are multiplied like any other\n";
  const std::string json =
      "{\"sparsified\": " + fmt("%.9g", r.sparsified) + ", \"model\": " + fmt("%.9g", r.model) + ", \"by_class\": {" +
      json_classes + "}, \"flops_per_item\": " + fmt("%.9g", r.flops_per_item) + ", \"dense_flops_per_item\": " +
      fmt("%.9g", r.dense_flops_per_item) + ", \"mean_flops_per_item\": " + fmt("%.9g", r.mean_flops_per_item) +
      ", \"layer_flops_per_item\": " + fmt("%.9g", r.layer_flops_per_item) + ", \"layer_dense_flops_per_item\": " +
      fmt("%.9g", r.layer_dense_flops_per_item) + ", \"mean_layer_flops_per_item\": " +
      fmt("%.9g", r.mean_layer_flops_per_item) + "}";
  out.push_back({text, "sparsity", json});
}

double SparsityFix::state_bytes() const {
  double bytes = 0;
  for (const auto& m : training_.masks()) bytes += static_cast<double>(m.param.nbytes());
  return bytes;
}

}  // namespace gridtrain
