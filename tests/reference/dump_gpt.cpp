// Writes a GPT's weights, one batch, and gridtrain's loss, gradient norm and gradients for that
// batch into an HDF5 file, so that check_gpt.py can recompute them with PyTorch.
// Usage: dump_gpt OUT.h5
#include <cmath>
#include <cstdio>

#include "gridtrain/model/gpt.hpp"
#include "gridtrain/util/h5.hpp"

using namespace gridtrain;

namespace {
void write(hid_t file, const std::string& name, const torch::Tensor& t) {
  auto c = t.contiguous();
  std::vector<hsize_t> dims(c.sizes().begin(), c.sizes().end());
  H5Id lcpl(H5Pcreate(H5P_LINK_CREATE), "lcpl");
  H5Pset_create_intermediate_group(lcpl, 1);
  H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "space " + name);
  const bool is_long = c.scalar_type() == torch::kLong;
  H5Id ds(H5Dcreate2(file, name.c_str(), is_long ? H5T_STD_I64LE : H5T_IEEE_F32LE, space, lcpl, H5P_DEFAULT,
                     H5P_DEFAULT),
          "create " + name);
  H5Dwrite(ds, is_long ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.data_ptr());
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dump_gpt OUT.h5\n");
    return 2;
  }
  // Odd sizes on purpose: vocab 67, 3 heads, T shorter than block_size.
  const GptShape s{67, 24, 3, 3, 48};
  Gpt gpt(s);
  gpt.initialize(2024);
  torch::manual_seed(5);
  auto idx = torch::randint(0, s.vocab_size, {3, 20}, torch::kLong);      // (B, T)
  auto targets = torch::randint(0, s.vocab_size, {3, 20}, torch::kLong);  // (B, T)
  auto loss = gpt.loss(idx, targets);
  loss.backward();
  double sq = 0;
  for (const auto& p : gpt.parameters()) sq += p.grad().to(torch::kFloat64).square().sum().item<double>();

  h5_silence_errors();
  H5Id file(H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), std::string("create ") + argv[1]);
  for (const auto& p : gpt.named_parameters()) {
    write(file, "/model/" + p.key(), p.value().detach());
    write(file, "/grad/" + p.key(), p.value().grad());
  }
  write(file, "/batch/idx", idx);
  write(file, "/batch/targets", targets);
  write(file, "/result/loss", loss.detach().to(torch::kFloat32).reshape({1}));
  write(file, "/result/grad_norm", torch::tensor({static_cast<float>(std::sqrt(sq))}));
  for (auto [k, v] : {std::pair{"vocab_size", s.vocab_size}, {"block_size", s.block_size}, {"n_layer", s.n_layer},
                      {"n_head", s.n_head}, {"n_embd", s.n_embd}})
    h5_write_attr(file, k, static_cast<long long>(v));
  std::printf("gridtrain: loss %.8f grad_norm %.8f\n", loss.item<double>(), std::sqrt(sq));
  return 0;
}
