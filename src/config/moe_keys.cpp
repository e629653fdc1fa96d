// The [moe] keys: how many experts, which layers, how tokens are routed and balanced.
#include "moe_keys.hpp"

#include "key_makers.hpp"

namespace gridtrain::detail {
namespace {

// moe.layers: all, every:N (Qwen2-MoE's decoder_sparse_step), or a list of layer indices.
Key layers_key() {
  const std::string valid = "all, every:N (N >= 1), or layer indices >= 0 separated by commas, e.g. 1,3";
  auto show = [](const Config& c) {
    if (!c.moe.list.empty()) return comma_list(c.moe.list);
    return c.moe.every == 1 ? std::string("all") : "every:" + std::to_string(c.moe.every);
  };
  return {{"moe.layers", "all",
           "which layers' MLPs are mixtures of experts: all; every:N, layers N-1, 2N-1, ... (Qwen2-MoE's "
           "decoder_sparse_step); or a list of layer indices (0-based), the others keep the dense SwiGLU", valid},
          [valid](Config& c, const std::string& text) -> std::optional<std::string> {
            std::vector<int> list;
            int every = 1;
            if (text.starts_with("every:")) {
              const std::string step = text.substr(6);
              const auto n = parse_number<int>(step);
              if (!n || *n < 1) return std::string("'").append(step).append("' is not a layer step >= 1; valid: ") + valid;
              every = *n;
            } else if (text != "all") {
              for (std::size_t begin = 0;;) {
                const std::size_t end = std::min(text.find(',', begin), text.size());
                const std::string item = text.substr(begin, end - begin);
                const auto n = parse_number<int>(item);
                if (!n || *n < 0) return "'" + item + "' is not a layer index; valid: " + valid;
                list.push_back(*n);
                if (end == text.size()) break;
                begin = end + 1;
              }
            }
            c.moe.every = every, c.moe.list = list;
            return std::nullopt;
          },
          show};
}

}  // namespace

std::vector<Key> moe_keys() {
  return {
      int_key<int>("moe.experts", GT_REF(moe.experts),
                   "llama: routed experts E in each MoE layer (SwiGLU MLPs; Shazeer et al. 2017, Mixtral); "
                   "0 = a dense model", 0),
      int_key<int>("moe.top_k", GT_REF(moe.top_k), "experts each token is routed to (k <= moe.experts)", 1),
      layers_key(),
      int_key<int>("moe.ffn_hidden", GT_REF(moe.ffn_hidden),
                   "each expert's SwiGLU width; 0 = the dense MLP's (model.ffn_hidden or Llama's rule)", 0),
      int_key<int>("moe.shared_ffn_hidden", GT_REF(moe.shared_ffn_hidden),
                   "width of a shared expert that every token passes through, weighted by a sigmoid gate "
                   "(Qwen2-MoE's shared_expert and shared_expert_gate); 0 = none", 0),
      bool_key("moe.norm_topk_prob", GT_REF(moe.norm_topk_prob),
               "renormalize the k chosen router probabilities to sum to 1 (Mixtral; Qwen2-MoE's "
               "norm_topk_prob); false: the softmax over all experts, as chosen"),
      enum_key("moe.router", GT_REF(moe.router),
               "how each token chooses its k experts: softmax (Mixtral, Qwen2-MoE); sigmoid (DeepSeek-V3: "
               "sigmoid scores, the load-balancing loss over their per-token normalization); balanced (forced "
               "perfect balance for benchmarks and tests: sequence position t to experts (t*k + j) mod E, "
               "weighted by the softmax)"),
      real_key("moe.expert_bias_rate", GT_REF(moe.expert_bias_rate),
               "auxiliary-loss-free balancing (Wang et al. 2024; DeepSeek-V3 uses 0.001 with moe.router = "
               "sigmoid): the choice goes by score + b_e, and after each step b_e moves by this rate towards "
               "balance, +rate for an expert that received fewer slots than the mean over the global batch, "
               "-rate for more; b is checkpointed; 0 = no bias", 0.0, false),
      real_key("moe.aux_loss_coeff", GT_REF(moe.aux_loss_coeff),
               "weight of the load-balancing loss E * sum_e f_e P_e (Switch Transformer, Fedus et al. 2021, "
               "eq. 4-6) over all MoE layers' tokens together, as transformers' load_balancing_loss_func: "
               "k at perfect balance, E at collapse onto k experts", 0.0, false),
      real_key("moe.z_loss_coeff", GT_REF(moe.z_loss_coeff),
               "weight of the router z-loss, the mean over all MoE layers' tokens of logsumexp(router "
               "logits)^2 (ST-MoE, Zoph et al. 2022, eq. 5)", 0.0, false),
      real_key("moe.capacity_factor", GT_REF(moe.capacity_factor),
               "expert capacity (GShard; Megatron-Core's moe_expert_capacity_factor): each expert computes at "
               "most ceil(factor * N*k / E) of a rank's micro-batch of N tokens' routed slots, those with the "
               "largest combine weight (ties: the earlier token), and the others are dropped (the token keeps "
               "its residual); the dropped slots are reported (moe_dropped); 0 = dropless", 0.0, false),
  };
}

void check_moe(const Config& c, std::vector<std::string>& errors) {
  const Config::Moe& m = c.moe;
  if (!m.enabled()) return;
  const std::string experts = "moe.experts = " + std::to_string(m.experts);
  if (c.model.type != ModelType::Llama) {
    errors.push_back(experts + " makes a llama's MLPs mixtures of experts, but model.type = " + name_of(c.model.type) +
                     "; valid: 0, or model.type = llama");
    return;
  }
  if (m.top_k > m.experts)
    errors.push_back("moe.top_k = " + std::to_string(m.top_k) + " is more than " + experts +
                     "; valid: 1 to moe.experts");
  for (const int layer : m.list)
    if (layer >= c.model.n_layer)
      errors.push_back("moe.layers names layer " + std::to_string(layer) + ", but model.n_layer = " +
                       std::to_string(c.model.n_layer) + "; valid: indices 0 to " + std::to_string(c.model.n_layer - 1));
  if (m.list.empty() && m.every > c.model.n_layer)
    errors.push_back("moe.layers = every:" + std::to_string(m.every) + " leaves no MoE layer in model.n_layer = " +
                     std::to_string(c.model.n_layer) + "; valid: every:N with N <= n_layer");
  if (m.router == MoeRouter::Balanced && m.expert_bias_rate > 0)
    errors.push_back("moe.expert_bias_rate = " + show_double(m.expert_bias_rate) +
                     " with moe.router = balanced: forced routing ignores the bias; valid: 0, or moe.router = "
                     "softmax or sigmoid");
  // Not yet made to work with experts: each is refused by name rather than run unproved.
  if (c.train.recompute == Recompute::Full)
    errors.push_back(experts + " with train.recompute = full: the router statistics of the balancing losses are "
                     "taken in the forward that full recomputation runs without autograd; valid: none or selective");
  if (c.optim.type == OptimizerType::OnebitAdam)
    errors.push_back(experts + " with optim.type = onebit_adam: 1-bit compression of expert gradients is not "
                     "supported; valid: optim.type = adamw or sgd");
  if (c.sparsity.enabled())
    errors.push_back(experts + " with sparsity.method = " + name_of(c.sparsity.method) +
                     ": dynamic sparse training of experts is not supported; valid: sparsity.method = none");
}

}  // namespace gridtrain::detail
