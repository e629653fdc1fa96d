// Document-aware training of a language model on packed windows (Megatron's
// get_ltor_masks_and_position_ids, megatron/core/datasets/gpt_dataset.py): where the documents
// of each window start, the positions that restart there, the block-diagonal causal mask, and the
// targets that carry no loss.
#pragma once
#include <cstdint>

#include <torch/torch.h>

namespace gridtrain::lm {

/// What a language model does with the end-of-document tokens of its windows (data.eod_token,
/// data.reset_position_ids, data.document_mask, data.eod_mask_loss).
struct DocumentRules {
  std::int64_t eod = -1;         ///< the end-of-document token id; -1: the windows have no documents
  bool reset_positions = false;  ///< positions restart after each end-of-document token
  bool mask = false;             ///< each token attends within its own document only
  bool mask_loss = false;        ///< the prediction from an end-of-document token carries no loss
  /// Whether the blocks of every pipeline stage need the window's ids: their attention masks and
  /// (rotary) positions come from them.
  bool every_stage() const { return reset_positions || mask; }
};

/// One micro-batch's documents as its embeddings and attention use them; an undefined tensor is
/// the plain causal window.
struct Documents {
  torch::Tensor positions;  ///< (B, T) int64: each token's position within its document; undefined: 0 .. T−1
  torch::Tensor attend;     ///< (B, 1, T, T) bool: key j is in query i's document and j <= i; undefined: causal
};

/// The documents of the windows ids (B, T): a document ends with its end-of-document token (which
/// belongs to it) and the next starts after it; each window's first token starts one. positions
/// with rules.reset_positions, attend with rules.mask, each undefined otherwise.
Documents documents(const torch::Tensor& ids, const DocumentRules& rules);

/// The target of a position that carries no loss (data.eod_mask_loss).
inline constexpr std::int64_t kNoLoss = -1;

/// targets (B, T) with kNoLoss where the input ids (B, T) hold the end-of-document token (with
/// rules.mask_loss; else targets as they are).
torch::Tensor loss_targets(const torch::Tensor& ids, const torch::Tensor& targets, const DocumentRules& rules);

}  // namespace gridtrain::lm
