#include "gridtrain/parallel/data_parallel.hpp"

#include <stdexcept>

namespace gridtrain {
namespace {

std::vector<std::int64_t> numels(const std::vector<torch::Tensor>& params) {
  std::vector<std::int64_t> n;
  for (const auto& p : params) n.push_back(p.numel());
  return n;
}

int stage_in_effect(const ZeroOptions& zero, const Axis& dp, Compression compression) {
  if (zero.stage > 0 && compression != Compression::None)
    throw std::invalid_argument("Reducer: ZeRO reduce-scatters fp32 gradients; compression must be none");
  return dp.size() > 1 ? zero.stage : 0;
}

}  // namespace

DataParallel::DataParallel(std::vector<torch::Tensor> params, Axis& dp, double bucket_mb, bool overlap,
                           Compression compression, const ZeroOptions& zero)
    : params_(std::move(params)), dp_(dp), stage_(stage_in_effect(zero, dp, compression)),
      layout_(std::make_shared<const BucketLayout>(numels(params_), bucket_mb, zero.unit_of, stage_ > 0 ? dp.size() : 1,
                                                   stage_ == 3, params_.at(0).element_size())),
      parameters_(params_, layout_, dp, stage_, zero.prefetch),
      reducer_(params_, layout_, dp, overlap, compression, stage_, &parameters_) {
  parameters_.connect(reducer_);
}

std::vector<ShardPiece> DataParallel::shard_pieces() const {
  std::vector<ShardPiece> out;
  const int r = dp_.rank();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto [lo, hi] = layout_->shard_range(i, r);
    const std::size_t b = layout_->bucket_of(i);
    ShardPiece piece{parameters_.own(b).narrow(0, lo - r * layout_->shard_size(b), hi - lo),
                     hi > lo ? lo - layout_->offset(i) : 0};
    piece.param.mutable_grad() = reducer_.reduced_gradient(i);
    out.push_back(std::move(piece));
  }
  return out;
}

torch::Tensor DataParallel::gradient_sq(const std::vector<std::size_t>& counted, torch::Device device) const {
  std::vector<torch::Tensor> norms;  // fp32 kernels with blocked accumulation, combined in fp64
  for (const auto i : counted) {
    const auto g = reducer_.reduced_gradient(i);  // 2-byte gradients: accumulated and returned in fp32
    norms.push_back(g.scalar_type() == torch::kFloat ? g.norm() : torch::linalg_vector_norm(g, 2, {}, false, torch::kFloat));
  }
  auto sq = norms.empty() ? torch::zeros({}, torch::TensorOptions(torch::kDouble).device(device))
                          : torch::stack(norms).to(torch::kDouble).square().sum();
  return stage_ > 0 ? sq * dp_.size() : sq;
}

}  // namespace gridtrain
