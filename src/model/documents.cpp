#include "gridtrain/model/documents.hpp"

namespace gridtrain::lm {

Documents documents(const torch::Tensor& ids, const DocumentRules& rules) {
  Documents d;
  if (!rules.every_stage()) return d;
  const auto T = ids.size(1);
  auto starts = torch::ones_like(ids, torch::kBool);  // (B, T): a document starts here
  starts.slice(1, 1).copy_(ids.slice(1, 0, T - 1) == rules.eod);
  if (rules.reset_positions) {
    const auto t = torch::arange(T, ids.options()).expand_as(ids);
    d.positions = t - std::get<0>(torch::where(starts, t, 0).cummax(1));  // t − the latest start at or before t
  }
  if (rules.mask) {
    const auto document = starts.cumsum(1);  // (B, T): the document's number within its window
    const auto causal = torch::ones({T, T}, starts.options()).tril();
    d.attend = (document.unsqueeze(2) == document.unsqueeze(1)).logical_and_(causal).unsqueeze(1);
  }
  return d;
}

torch::Tensor loss_targets(const torch::Tensor& ids, const torch::Tensor& targets, const DocumentRules& rules) {
  return rules.mask_loss ? targets.masked_fill(ids == rules.eod, kNoLoss) : targets;
}

}  // namespace gridtrain::lm
