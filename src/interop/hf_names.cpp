#include "hf_names.hpp"

#include "gridtrain/model/language_model.hpp"

namespace gridtrain::hf {

using lm::ends_with;

std::string to_hf(ModelType t, const std::string& name) { return t == ModelType::Gpt ? "transformer." + name : name; }

std::string to_mixtral(const std::string& name) {
  const auto mlp = name.find(".mlp.");
  const bool moe = mlp != std::string::npos && (name.find(".mlp.gate.", mlp) == mlp || name.find(".mlp.experts.", mlp) == mlp);
  if (!moe) return name;
  std::string out = name.substr(0, mlp) + ".block_sparse_moe." + name.substr(mlp + 5);
  for (const auto& [ours, theirs] : {std::pair{".gate_proj.", ".w1."}, {".up_proj.", ".w3."}, {".down_proj.", ".w2."}})
    if (const auto at = out.find(ours); at != std::string::npos) return out.replace(at, std::string(ours).size(), theirs);
  return out;  // the router, block_sparse_moe.gate.weight
}

std::string from_mixtral(const std::string& name) {
  const auto moe = name.find(".block_sparse_moe.");
  if (moe == std::string::npos) return name;
  std::string out = name.substr(0, moe) + ".mlp." + name.substr(moe + 18);
  for (const auto& [theirs, ours] : {std::pair{".w1.", ".gate_proj."}, {".w3.", ".up_proj."}, {".w2.", ".down_proj."}})
    if (const auto at = out.find(theirs); at != std::string::npos) return out.replace(at, std::string(theirs).size(), ours);
  return out;
}

std::optional<std::string> from_hf(ModelType t, const std::string& name) {
  if (t != ModelType::Gpt) return name;
  if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") || name == "lm_head.weight")
    return std::nullopt;
  // OpenAI's original GPT-2 files name the tensors without the prefix.
  return name.starts_with("transformer.") ? name.substr(12) : name;
}

bool transposed(ModelType t, const std::string& name) {
  if (t != ModelType::Gpt || !ends_with(name, ".weight")) return false;
  return ends_with(name, "attn.c_attn.weight") || ends_with(name, "c_proj.weight") || ends_with(name, "mlp.c_fc.weight");
}

WholeTensor transpose(WholeTensor t) {
  const auto rows = t.shape[0], cols = t.shape[1];
  std::vector<float> out(t.data.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[c * rows + r] = t.data[r * cols + c];
  return {t.name, {cols, rows}, std::move(out)};
}

}  // namespace gridtrain::hf
