// What export and import share: the tensor-name map between gridtrain and transformers for each
// family, and the weights-only checkpoint's whole tensors.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gridtrain/config/config.hpp"

namespace gridtrain::hf {

/// A whole tensor, row-major fp32, under gridtrain's name.
struct WholeTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};

/// transformers' name of gridtrain parameter `name` of a model of type t: the llama's are the
/// same; the gpt's get GPT-2's prefix "transformer.".
std::string to_hf(ModelType t, const std::string& name);
/// Mixtral's on-disk name of a gridtrain llama's MoE parameter (other names unchanged): the MoE
/// layer's `mlp.` is `block_sparse_moe.`, an expert's gate_proj, up_proj, down_proj are w1, w3, w2
/// (transformers' conversion_mapping turns them into its fused experts on load).
std::string to_mixtral(const std::string& name);
/// gridtrain's name of Mixtral's on-disk tensor `name`: to_mixtral's inverse (other names unchanged).
std::string from_mixtral(const std::string& name);
/// gridtrain's name of transformers tensor `name`, or nullopt for a tensor gridtrain does not
/// hold (GPT-2's causal-mask buffers attn.bias and attn.masked_bias; a tied lm_head.weight).
/// Unknown names come back unchanged (the caller's shape check refuses them).
std::optional<std::string> from_hf(ModelType t, const std::string& name);
/// Whether the tensor is stored transposed by transformers (GPT-2's Conv1D weights, (in, out)).
bool transposed(ModelType t, const std::string& name);
/// t (R, C) → (C, R).
WholeTensor transpose(WholeTensor t);

}  // namespace gridtrain::hf
