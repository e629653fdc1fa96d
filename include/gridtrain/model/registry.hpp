// The models by the deck's model.type: one table (src/model/registry.cpp) gives for each its
// module, its plan, the layers a pipeline splits and the layouts it refuses. A new model adds one
// entry there.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gridtrain/data/data_shape.hpp"
#include "gridtrain/model/layout.hpp"
#include "gridtrain/model/model.hpp"

namespace gridtrain {

struct Config;

/// The plan of c.model.type for `layout` (same errors as make_model).
std::unique_ptr<ModelPlan> plan_model(const Config& c, const DataShape& data, const ModelLayout& layout);

/// Builds the model named by c.model.type for data of that shape, this rank's part of it for
/// `layout` (default: the whole model).
std::shared_ptr<Model> make_model(const Config& c, const DataShape& data);
std::shared_ptr<Model> make_model(const Config& c, const DataShape& data, const ModelLayout& layout);

/// The layers of c's model that pipeline stages split among themselves (grid.stage_layers):
/// a transformer's blocks, or 1 for a model that has one stage.
int model_layers(const Config& c);

/// Whether c's model is a language model: it predicts tokens of a vocabulary (Model::logits, `gridtrain generate`).
bool language_model(const Config& c);

/// model.attention resolved: whether the fused kernel (at::scaled_dot_product_attention) is used
/// (sdpa or auto) rather than the written-out math.
bool fused_attention(const Config& c);

/// The width F_e of c's MoE experts: moe.ffn_hidden, or the dense SwiGLU width it defaults to.
std::int64_t expert_width(const Config& c);

/// What keeps c's model from running with tp tensor-parallel and pp pipeline ranks, each naming
/// the keys and what would be valid; empty: it can.
std::vector<std::string> model_layout_problems(const Config& c, int tp, int pp);

/// The keys that define the function c's model computes from its weights, model.type first, each
/// with its value in effect as deck text (n_kv_head and ffn_hidden resolved from their 0 = rule
/// defaults): two decks whose lists are equal compute the same outputs from the same weights. Not
/// the vocabulary, which the data gives (the embedding's shape carries it), nor execution choices
/// (model.attention, model.matmul).
std::vector<std::pair<std::string, std::string>> model_function(const Config& c);

}  // namespace gridtrain
