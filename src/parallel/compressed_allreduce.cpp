#include "gridtrain/parallel/compressed_allreduce.hpp"

#include <stdexcept>


namespace gridtrain {

std::size_t compressed_allreduce_mean(Axis& axis, const Compressor& c, torch::Tensor data, FeedbackState& state,
                                      const std::string& label) {
  if (data.dim() != 1 || !data.is_contiguous() || data.scalar_type() != torch::kFloat32)
    throw std::invalid_argument("compressed_allreduce_mean(" + label + "): needs a contiguous (n,) fp32 tensor");
  const auto p = static_cast<std::int64_t>(axis.size()), n = data.numel();
  const std::int64_t m = (n + p - 1) / p;  // chunk length; the last chunk is zero-padded
  const auto cb = static_cast<std::int64_t>(c.compressed_bytes(static_cast<std::size_t>(m)));
  const auto f32 = data.options();
  const auto u8 = data.options().dtype(torch::kUInt8);
  const bool ef = c.error_feedback();
  if (ef && (!state.worker.defined() || state.worker.numel() != m * p))
    state = {torch::zeros({m * p}, f32), torch::zeros({m}, f32)};
  auto chunk = [](const torch::Tensor& t, std::int64_t j, std::int64_t len) { return t.data_ptr<float>() + j * len; };
  auto bytes = [](const torch::Tensor& t, std::int64_t j, std::int64_t len) { return t.data_ptr<std::uint8_t>() + j * len; };
  const auto um = static_cast<std::size_t>(m), ucb = static_cast<std::size_t>(cb);

  // Phase 1: compress my p chunks (worker feedback), exchange so that rank j gets every chunk j.
  auto padded = torch::zeros({m * p}, f32);
  padded.narrow(0, 0, n).copy_(data);
  auto send = torch::empty({cb * p}, u8), recv = torch::empty({cb * p}, u8);
  for (std::int64_t j = 0; j < p; ++j)
    c.compress(chunk(padded, j, m), um, ef ? chunk(state.worker, j, m) : nullptr, bytes(send, j, cb));
  axis.all_to_all(send.data_ptr(), recv.data_ptr(), ucb, label + ", compressed phase 1").wait();

  // Phase 2: average the p pieces of my chunk in fp32, compress again (server feedback), gather.
  auto piece = torch::empty({m}, f32), mean = torch::zeros({m}, f32);
  for (std::int64_t q = 0; q < p; ++q) {
    c.decompress(bytes(recv, q, cb), um, piece.data_ptr<float>());
    mean.add_(piece);
  }
  mean.div_(static_cast<double>(p));
  auto mine = torch::empty({cb}, u8);
  c.compress(mean.data_ptr<float>(), um, ef ? state.server.data_ptr<float>() : nullptr, mine.data_ptr<std::uint8_t>());
  axis.all_gather(mine.data_ptr(), send.data_ptr(), ucb, label + ", compressed phase 2").wait();

  for (std::int64_t j = 0; j < p; ++j) c.decompress(bytes(send, j, cb), um, chunk(padded, j, m));
  data.copy_(padded.narrow(0, 0, n));
  return 2 * static_cast<std::size_t>(p - 1) * ucb;  // all-to-all: p−1 chunks out; ring all-gather: p−1 forwarded
}

}  // namespace gridtrain
