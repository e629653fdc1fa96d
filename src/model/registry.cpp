// model.type -> its module and its plan. Register new models here.
#include <map>

#include "gridtrain/config/config.hpp"
#include "gridtrain/model/gpt.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {
namespace {

struct Entry {
  std::shared_ptr<LanguageModel> (*build)(const Config&, int, const ModelLayout&);
  std::unique_ptr<ModelPlan> (*plan)(const Config&, int, const ModelLayout&);
};

GptShape gpt_shape(const Config& c, int vocab) {
  return {vocab, c.model.block_size, c.model.n_layer, c.model.n_head, c.model.n_embd, fused_attention(c)};
}

const Entry& entry(const Config& cfg) {
  static const std::map<ModelType, Entry> registry = {
      {ModelType::Gpt,
       {[](const Config& c, int v, const ModelLayout& l) -> std::shared_ptr<LanguageModel> {
          return std::make_shared<Gpt>(gpt_shape(c, v), l);
        },
        [](const Config& c, int v, const ModelLayout& l) -> std::unique_ptr<ModelPlan> {
          return std::make_unique<GptPlan>(gpt_shape(c, v), l);
        }}},
  };
  return registry.at(cfg.model.type);  // every ModelType is registered
}

}  // namespace

std::shared_ptr<LanguageModel> make_model(const Config& c, int vocab_size) { return make_model(c, vocab_size, {}); }

std::shared_ptr<LanguageModel> make_model(const Config& c, int vocab_size, const ModelLayout& layout) {
  return entry(c).build(c, vocab_size, layout);
}

std::unique_ptr<ModelPlan> plan_model(const Config& c, int vocab_size, const ModelLayout& layout) {
  return entry(c).plan(c, vocab_size, layout);
}

bool fused_attention(const Config& c) {
  if (c.model.attention == Attention::Sdpa && !sdpa_available())
    throw Error("model.attention = sdpa needs LibTorch >= 2.0 (at::scaled_dot_product_attention); this build has "
                "LibTorch " TORCH_VERSION "; use model.attention = auto or math");
  return c.model.attention == Attention::Sdpa || (c.model.attention == Attention::Auto && sdpa_available());
}

std::int64_t count_parameters(const torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace gridtrain
