// The [sparsity] keys: which weights dynamic sparse training masks, to what sparsity, and how
// the masks change (sparse/sparse_training.hpp has the methods and their papers).
#include "sparsity_keys.hpp"

#include <algorithm>

#include "key_makers.hpp"

namespace gridtrain::detail {
namespace {

// sparsity.tensors: a comma-separated list of tensor classes, "matrix,conv".
Key tensors_key() {
  std::string valid = "a comma-separated list of";
  for (const char* n : enum_names(TensorClass{})) valid += std::string(" ") + n;
  auto show = [](const Config& c) {
    std::string out;
    for (const TensorClass t : c.sparsity.tensors) (out += out.empty() ? "" : ",") += name_of(t);
    return out;
  };
  const Config defaults;  // a named object: GCC 12 warns of a temporary's fields as maybe uninitialized
  return {{"sparsity.tensors", show(defaults),
           "classes of parameters sparsified: matrix (linear layers' weights), conv (convolution kernels), "
           "embedding (token and position tables), head (the output layer's matrix; gpt's is its token embedding), "
           "vector (biases and norm gains)", valid},
          [valid](Config& c, const std::string& text) -> std::optional<std::string> {
            std::vector<TensorClass> classes;
            const auto names = enum_names(TensorClass{});
            for (std::size_t begin = 0; begin <= text.size();) {
              const std::size_t end = std::min(text.find(',', begin), text.size());
              const std::string item = text.substr(begin, end - begin);
              const auto it = std::find(names.begin(), names.end(), item);
              if (it == names.end()) return "'" + item + "' is not a tensor class; valid: " + valid;
              classes.push_back(static_cast<TensorClass>(it - names.begin()));
              begin = end + 1;
            }
            c.sparsity.tensors = classes;
            return std::nullopt;
          },
          show};
}

}  // namespace

std::vector<Key> sparsity_keys() {
  return {
      enum_key("sparsity.method", GT_REF(sparsity.method),
               "dynamic sparse training: none; gmp (gradual magnitude pruning, Zhu & Gupta 2017: sparsity rises "
               "from 0 to target along a cubic between start and end); set (prune to target at start, then every "
               "interval drop the drop_fraction smallest-magnitude active weights and regrow as many at random, "
               "Mocanu et al. 2018); rigl (as set, but regrow where the dense gradient is largest, with a cosine "
               "drop fraction, Evci et al. 2020). New connections (inactive before the update) start at zero"),
      real_key("sparsity.target", GT_REF(sparsity.target),
               "final fraction of zeros over the sparsified tensors (per tensor with distribution = uniform)", 0.0,
               false, 0.999),
      int_key<int>("sparsity.start", GT_REF(sparsity.start),
                   "step of the first mask update (set, rigl: the initial magnitude pruning to target)", 0),
      int_key<int>("sparsity.end", GT_REF(sparsity.end),
                   "last step at which masks change; 0 = 3/4 of train.steps (RigL's T_end)", 0),
      int_key<int>("sparsity.interval", GT_REF(sparsity.interval), "steps between mask updates (delta T)", 1),
      enum_key("sparsity.distribution", GT_REF(sparsity.distribution),
               "per-tensor densities: uniform (every tensor at target) or erk (Erdős–Rényi-kernel, Evci et al. "
               "2020: density proportional to the sum of a tensor's dimensions over their product, the same total "
               "number of zeros)"),
      real_key("sparsity.drop_fraction", GT_REF(sparsity.drop_fraction),
               "set: fraction of the active weights dropped and regrown at each mask update; rigl: its value at "
               "start, decaying as alpha/2 (1 + cos(pi (t - start) / (end - start)))", 0.0, true, 1.0),
      tensors_key(),
  };
}

void check_sparsity(const Config& c, std::vector<std::string>& errors) {
  const Config::Sparsity& s = c.sparsity;
  if (!s.enabled()) return;
  const std::string method = std::string("sparsity.method = ") + name_of(s.method);
  if (s.end_step(c.train.steps) <= s.start)
    errors.push_back(method + ": sparsity.end = " + std::to_string(s.end_step(c.train.steps)) + " (" +
                     (s.end > 0 ? "as given" : "3/4 of train.steps") + ") is not after sparsity.start = " +
                     std::to_string(s.start) + "; valid: start < end");
  if (c.optim.type == OptimizerType::OnebitAdam)
    errors.push_back(method + " with optim.type = onebit_adam: its error-feedback residuals would carry pruned "
                     "weights' updates; valid: optim.type = adamw or sgd");
  const bool tied = c.model.type == ModelType::Gpt || (c.model.type == ModelType::Llama && c.model.tie_embeddings);
  const auto& t = s.tensors;
  const bool masks_tied = std::find(t.begin(), t.end(), TensorClass::Embedding) != t.end() ||
                          std::find(t.begin(), t.end(), TensorClass::Head) != t.end();
  if (tied && masks_tied && c.grid.pp > 1)
    errors.push_back(method + " of the tied token embedding with grid.pp = " + std::to_string(c.grid.pp) +
                     ": its copies on the first and last stages would need one mask; valid: grid.pp = 1, or "
                     "sparsity.tensors without embedding and head");
}

}  // namespace gridtrain::detail
