// Internal: the deck keys of section [moe] (mixture-of-experts MLPs, model/moe.hpp).
#pragma once
#include <string>
#include <vector>

#include "keys.hpp"

namespace gridtrain::detail {

/// moe.experts, top_k, layers, ffn_hidden, shared_ffn_hidden, norm_topk_prob, aux_loss_coeff, z_loss_coeff.
std::vector<Key> moe_keys();
/// What keeps the [moe] keys from running with the rest of c (the model family, its layers, the
/// optimizer and the features not yet made to work with experts), appended to errors.
void check_moe(const Config& c, std::vector<std::string>& errors);

}  // namespace gridtrain::detail
