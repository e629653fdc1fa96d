// optim.type -> constructor. Register new optimizers here.
#include <functional>
#include <map>

#include "gridtrain/config/config.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {

std::unique_ptr<Optimizer> make_optimizer(const Config& c, std::vector<NamedParameter> params, Axis& dp) {
  using Factory = std::function<std::unique_ptr<Optimizer>(const Config&, std::vector<NamedParameter>, Axis&)>;
  static const std::map<std::string, Factory> registry = {
      {"adamw", [](const Config& cfg, std::vector<NamedParameter> p, Axis&) -> std::unique_ptr<Optimizer> {
         return std::make_unique<AdamW>(std::move(p), cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps,
                                        cfg.optim.weight_decay);
       }},
      {"sgd", [](const Config& cfg, std::vector<NamedParameter> p, Axis&) -> std::unique_ptr<Optimizer> {
         return std::make_unique<Sgd>(std::move(p), cfg.optim.momentum, cfg.optim.weight_decay);
       }},
      {"onebit_adam", [](const Config& cfg, std::vector<NamedParameter> p, Axis& axis) -> std::unique_ptr<Optimizer> {
         return std::make_unique<OnebitAdam>(std::move(p), axis, cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps,
                                             cfg.optim.weight_decay, cfg.optim.freeze_step);
       }},
  };
  auto it = registry.find(c.optim.type);
  if (it == registry.end()) {
    std::string known;
    for (const auto& [name, f] : registry) known += " " + name;
    throw Error("optim.type = '" + c.optim.type + "' is unknown; valid:" + known);
  }
  return it->second(c, std::move(params), dp);
}

}  // namespace gridtrain
