// Shard maths (parallel/shard.hpp, take_shard): the ranks' shards put back together are the
// global tensor, for plain and fused (parts) dimensions, with and without padding rows; and which
// ranks count a tensor toward the norm depends on the axis it is split along.
#include <torch/torch.h>

#include <catch2/catch.hpp>  // after torch: its CHECK replaces c10's

#include "gridtrain/parallel/shard.hpp"
#include "gridtrain/parallel/tensor_parallel.hpp"

using namespace gridtrain;

TEST_CASE("the shards of every rank reassemble the global tensor", "[shard]") {
  // 257 rows over 2 ranks: 129 each, the last rank's last row padding; 3 fused parts of 6 rows.
  for (const ShardSpec& spec : {ShardSpec{.global_shape = {257, 4}, .dim = 0}, ShardSpec{.global_shape = {5, 18}, .dim = 1, .parts = 3},
                               ShardSpec{.global_shape = {4, 8}, .dim = 0, .axis = AxisId::Dp}}) {
    for (int size : {1, 2, 3}) {
      CAPTURE(spec.global_shape, spec.dim, spec.parts, size);
      const auto full = torch::arange(spec.global_shape[0] * spec.global_shape[1], torch::kFloat).view(spec.global_shape);
      const int d = spec.dim;
      const std::int64_t per_part = spec.global_shape[static_cast<std::size_t>(d)] / spec.parts;
      const std::int64_t rows = shard_rows(spec, size);
      CHECK(rows * size >= per_part);
      CHECK(rows * size - per_part < size);  // padded up to the next multiple of size, no further
      std::vector<std::vector<torch::Tensor>> parts(static_cast<std::size_t>(spec.parts));
      for (int r = 0; r < size; ++r) {
        const auto local = take_shard(full, spec, r, size);
        CHECK(local.sizes().vec() == local_shape(spec, size));
        const std::int64_t valid = valid_rows(spec, r, size);
        const auto chunks = local.chunk(spec.parts, d);
        for (int p = 0; p < spec.parts; ++p) {
          parts[static_cast<std::size_t>(p)].push_back(chunks[p].narrow(d, 0, valid));
          const auto padding = chunks[p].narrow(d, valid, rows - valid);
          CHECK(torch::equal(padding, torch::zeros_like(padding)));
        }
      }
      std::vector<torch::Tensor> whole;
      for (auto& p : parts) whole.push_back(torch::cat(p, d));
      CHECK(torch::equal(torch::cat(whole, d), full));
    }
  }
}

TEST_CASE("a tensor counts toward the norm once per replica, by the axis it is split along", "[shard]") {
  const ShardSpec replicated{.global_shape = {8}}, over_tp{.global_shape = {8}, .dim = 0},
      over_dp{.global_shape = {8}, .dim = 0, .axis = AxisId::Dp};
  ShardSpec tied_copy = over_tp;
  tied_copy.owner = false;
  for (int tp_rank : {0, 1}) {
    CAPTURE(tp_rank);
    CHECK(replicated.counted_on(tp_rank) == (tp_rank == 0));
    CHECK(over_tp.counted_on(tp_rank));                       // each tp rank holds different rows
    CHECK(over_dp.counted_on(tp_rank) == (tp_rank == 0));     // replicated over tp
    CHECK_FALSE(tied_copy.counted_on(tp_rank));
  }
}
