// An Axis through an autograd function's context: as an integer, since IValue holds no raw
// pointers. The axis outlives every graph built during a step.
#pragma once
#include <cstdint>

#include <torch/torch.h>

#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

inline std::int64_t axis_handle(Axis& a) { return static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(&a)); }
inline Axis& axis_from(std::int64_t handle) { return *reinterpret_cast<Axis*>(static_cast<std::intptr_t>(handle)); }
/// The axis a forward saved as saved_data["axis"].
inline Axis& axis_of(torch::autograd::AutogradContext* ctx) { return axis_from(ctx->saved_data["axis"].toInt()); }

}  // namespace gridtrain
