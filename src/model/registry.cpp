// model.type -> constructor. Register new models here.
#include <functional>
#include <map>

#include "gridtrain/config/config.hpp"
#include "gridtrain/model/gpt.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {

std::shared_ptr<LanguageModel> make_model(const Config& c, int vocab_size) { return make_model(c, vocab_size, {}); }

std::shared_ptr<LanguageModel> make_model(const Config& c, int vocab_size, const ModelLayout& layout) {
  using Factory = std::function<std::shared_ptr<LanguageModel>(const Config&, int, const ModelLayout&)>;
  static const std::map<std::string, Factory> registry = {
      {"gpt", [](const Config& cfg, int v, const ModelLayout& l) {
         return std::make_shared<Gpt>(
             GptShape{v, cfg.model.block_size, cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd}, l);
       }},
  };
  auto it = registry.find(c.model.type);
  if (it == registry.end()) {
    std::string known;
    for (const auto& [name, f] : registry) known += " " + name;
    throw Error("model.type = '" + c.model.type + "' is unknown; valid:" + known);
  }
  return it->second(c, vocab_size, layout);
}

std::int64_t count_parameters(const torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace gridtrain
