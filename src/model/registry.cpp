// model.type -> its module and its plan. Register new models here.
#include <map>

#include "gridtrain/config/config.hpp"
#include "gridtrain/model/cnn.hpp"
#include "gridtrain/model/gpt.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {
namespace {

struct Entry {
  std::shared_ptr<Model> (*build)(const Config&, const DataShape&, const ModelLayout&);
  std::unique_ptr<ModelPlan> (*plan)(const Config&, const DataShape&, const ModelLayout&);
};

GptShape gpt_shape(const Config& c, const DataShape& d) {
  return {d.vocab_size, c.model.block_size, c.model.n_layer, c.model.n_head, c.model.n_embd, fused_attention(c)};
}

CnnShape cnn_shape(const Config& c, const DataShape& d) { return {d.channels, d.height, d.width, d.classes, c.model.channels}; }

const Entry& entry(const Config& cfg) {
  static const std::map<ModelType, Entry> registry = {
      {ModelType::Gpt,
       {[](const Config& c, const DataShape& d, const ModelLayout& l) -> std::shared_ptr<Model> {
          return std::make_shared<Gpt>(gpt_shape(c, d), l);
        },
        [](const Config& c, const DataShape& d, const ModelLayout& l) -> std::unique_ptr<ModelPlan> {
          return std::make_unique<GptPlan>(gpt_shape(c, d), l);
        }}},
      {ModelType::Cnn,  // data parallel only: the launch plan refuses tp, pp > 1
       {[](const Config& c, const DataShape& d, const ModelLayout&) -> std::shared_ptr<Model> {
          return std::make_shared<Cnn>(cnn_shape(c, d));
        },
        [](const Config& c, const DataShape& d, const ModelLayout&) -> std::unique_ptr<ModelPlan> {
          return std::make_unique<CnnPlan>(cnn_shape(c, d));
        }}},
  };
  return registry.at(cfg.model.type);  // every ModelType is registered
}

}  // namespace

std::shared_ptr<Model> make_model(const Config& c, const DataShape& data) { return make_model(c, data, {}); }

std::shared_ptr<Model> make_model(const Config& c, const DataShape& data, const ModelLayout& layout) {
  return entry(c).build(c, data, layout);
}

std::unique_ptr<ModelPlan> plan_model(const Config& c, const DataShape& data, const ModelLayout& layout) {
  return entry(c).plan(c, data, layout);
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
