// Checkpointer, the layout side: where this rank's part of each tensor lies in the file (its
// hyperslab, or its ZeRO pieces' rectangles) and whether this rank is the one that writes it.
#include "checkpointer_impl.hpp"

#include <stdexcept>

#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/grid/grid.hpp"

namespace gridtrain {

namespace {

// This rank's hyperslab of a tensor sharded by spec over tp rank r of n (docs/checkpoint-format.md).
Slab shard_slab(const ShardSpec& spec, const std::vector<hsize_t>& shape, int r, int n) {
  Slab s = Slab::all(shape);
  if (spec.dim < 0) return s;
  const auto d = static_cast<std::size_t>(spec.dim);
  const auto rows = static_cast<hsize_t>(shard_rows(spec, n)), valid = static_cast<hsize_t>(valid_rows(spec, r, n));
  if (valid == 0) return Slab::none();
  s.offset[d] = static_cast<hsize_t>(r) * rows;
  s.count[d] = valid;
  if (spec.parts > 1) {
    if (d != 0 || valid != rows) throw std::logic_error("fused parts are supported along dimension 0, unpadded");
    s.count[0] = rows;
    s.blocks = static_cast<hsize_t>(spec.parts);
    s.stride = shape[0] / s.blocks;
  }
  return s;
}

}  // namespace

// A rank writes what it alone holds of its replica: ZeRO pieces, rows of a tensor split along dp,
// else one rank of the tensor's replicas writes for all (dp; an expert's, expert dp); over tp,
// ShardSpec::counted_on.
bool Checkpointer::Impl::writes(const Entry& e) const {
  const bool split_over_dp = e.spec.dim >= 0 && e.spec.axis == AxisId::Dp;
  const bool represents = e.spec.expert ? grid_.expert_dp().rank() == 0 : grid_.represents({AxisId::Dp, AxisId::Cp});
  return e.local.defined() && (e.piece() || split_over_dp || represents) && e.spec.counted_on(grid_.tp().rank());
}

Selection Checkpointer::Impl::selection_of(const Entry& e) const {
  if (!e.local.defined()) return {};
  const Axis& split = grid_.axis(e.spec.axis);  // the rows of the global tensor this rank holds
  const Slab slab = shard_slab(e.spec, e.shape, split.rank(), split.size());
  if (!e.piece()) return rectangles(slab);
  return piece_selection(slab, {e.local_shape.begin(), e.local_shape.end()}, static_cast<hsize_t>(e.offset),
                         static_cast<hsize_t>(e.local.numel()));
}

}  // namespace gridtrain
