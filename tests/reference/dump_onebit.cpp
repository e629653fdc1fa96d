// Trains a small GPT with gridtrain's 1-bit Adam over the ranks of MPI_COMM_WORLD (the dp axis) and
// writes, for check_onebit.py's step-by-step reference, every step's micro-batches and losses and
// the state after every step: parameters, momentum and second moment (the same on every rank) and
// each rank's worker and server error-feedback residuals.
// Usage: mpiexec -n P dump_onebit OUT.h5 STEPS FREEZE_STEP [EPS V_FLOOR]   (default 1e-3 0)
//
// OUT.h5 (S = STEPS, n parameters flattened in the model's order, N = n padded to a multiple of
// P, m = N / P):
//   /param, /exp_avg, /exp_avg_sq  (S + 1, n) float32, row 0 the initial state
//   /worker (S + 1, P, N), /server (S + 1, P, m) float32
//   /idx, /targets                 (S, P, B, T) int64: rank r's micro-batch of step s + 1
//   /loss                          (S, P) float32: rank r's loss at that step
//   /grad                          (S, P, n) float32: rank r's gradient at that step (local)
//   attrs: the GptShape fields, lr, beta1, beta2, eps, weight_decay, v_floor, freeze_step, names and
//          shapes ("name:d0xd1;..."), in flattening order
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/model/gpt.hpp"
#include "gridtrain/optim/onebit_adam.hpp"
#include "gridtrain/util/h5.hpp"

using namespace gridtrain;

namespace {

// ε = 1e-3 by default, not Adam's usual 1e-8: once the second moment is frozen, a coordinate
// whose gradient is zero (the attention's key bias, which softmax ignores; the embeddings of
// positions past T) keeps v ≈ 0 and moves lr·scale/ε a step. At 1e-8 that is hundreds a step,
// the logits grow, and fp32 gradients of two implementations part at 1e-4, unless V_FLOOR (the
// frozen √v̂'s floor, optim.frozen_v_floor) bounds the move.
constexpr double kLr = 3e-3, kBeta1 = 0.9, kBeta2 = 0.999, kWeightDecay = 0.1;
constexpr std::int64_t kB = 2, kT = 12;

// Rank 0's rows of a (rows, width) dataset, filled row by row.
class Rows {
 public:
  Rows(hid_t file, const std::string& name, std::vector<hsize_t> shape, bool is_long)
      : shape_(std::move(shape)), type_(is_long ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT) {
    H5Id space(H5Screate_simple(static_cast<int>(shape_.size()), shape_.data(), nullptr), "space " + name);
    ds_ = H5Id(H5Dcreate2(file, name.c_str(), is_long ? H5T_STD_I64LE : H5T_IEEE_F32LE, space, H5P_DEFAULT,
                          H5P_DEFAULT, H5P_DEFAULT),
               "create " + name);
  }
  // Writes row `row` (everything after the first dimension) from data.
  void write(hsize_t row, const void* data) {
    std::vector<hsize_t> start(shape_.size(), 0), count = shape_;
    start[0] = row;
    count[0] = 1;
    H5Id file_space(H5Dget_space(ds_), "space");
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    H5Id mem(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), "mem");
    H5Dwrite(ds_, type_, mem, file_space, H5P_DEFAULT, data);
  }

 private:
  std::vector<hsize_t> shape_;
  hid_t type_;
  H5Id ds_;
};

// Every rank's `t` (fp32 or int64, contiguous) gathered on rank 0, rank after rank.
torch::Tensor gather(const torch::Tensor& t, int ranks) {
  const auto c = t.contiguous();
  auto all = torch::empty({ranks * c.numel()}, c.options());
  const auto bytes = static_cast<int>(c.numel() * c.element_size());
  MPI_Gather(c.data_ptr(), bytes, MPI_BYTE, all.data_ptr(), bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
  return all;
}

torch::Tensor flat(const std::vector<NamedParameter>& state, const std::string& suffix) {
  std::vector<torch::Tensor> parts;
  for (const auto& s : state)
    if (s.name.ends_with(suffix)) parts.push_back(s.param.reshape({-1}));
  return torch::cat(parts);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (argc != 4 && argc != 6) {
    std::fprintf(stderr, "usage: mpiexec -n P dump_onebit OUT.h5 STEPS FREEZE_STEP [EPS V_FLOOR]\n");
    return 2;
  }
  const int steps = std::atoi(argv[2]), freeze = std::atoi(argv[3]);
  const double eps = argc == 6 ? std::atof(argv[4]) : 1e-3, v_floor = argc == 6 ? std::atof(argv[5]) : 0.0;
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  {
    Axis dp("dp", MPI_COMM_WORLD);
    const GptShape s{67, 16, 2, 3, 27};  // an odd parameter count: the last chunk is padded at any P > 1
    Gpt gpt(s);
    gpt.initialize(2024);
    std::vector<NamedParameter> params;
    std::string layout;
    for (const auto& p : gpt.named_parameters()) {
      params.push_back({p.key(), p.value()});
      if (!layout.empty()) layout += ';';
      layout += p.key() + ':';
      for (std::size_t d = 0; d < p.value().sizes().size(); ++d) {
        if (d > 0) layout += 'x';
        layout += std::to_string(p.value().size(static_cast<std::int64_t>(d)));
      }
    }
    OnebitAdam opt(params, dp, kBeta1, kBeta2, eps, kWeightDecay, freeze, v_floor);
    const auto n = static_cast<hsize_t>(flat(opt.state(), "/exp_avg").numel());
    const auto rs = opt.rank_state();  // worker, server
    const auto N = static_cast<hsize_t>(rs[0].second.numel()), m = static_cast<hsize_t>(rs[1].second.numel());
    const auto S = static_cast<hsize_t>(steps), P = static_cast<hsize_t>(ranks);

    std::optional<H5Id> file;
    std::vector<Rows> rows;
    if (rank == 0) {
      h5_silence_errors();
      file.emplace(H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), std::string("create ") + argv[1]);
      for (auto [name, shape, is_long] :
           std::vector<std::tuple<std::string, std::vector<hsize_t>, bool>>{
               {"/param", {S + 1, n}, false}, {"/exp_avg", {S + 1, n}, false}, {"/exp_avg_sq", {S + 1, n}, false},
               {"/worker", {S + 1, P, N}, false}, {"/server", {S + 1, P, m}, false},
               {"/idx", {S, P, kB, kT}, true}, {"/targets", {S, P, kB, kT}, true}, {"/loss", {S, P}, false},
               {"/grad", {S, P, n}, false}})
        rows.emplace_back(*file, name, shape, is_long);
      for (auto [k, v] : {std::pair{"vocab_size", s.vocab_size}, {"block_size", s.block_size}, {"n_layer", s.n_layer},
                          {"n_head", s.n_head}, {"n_embd", s.n_embd}, {"freeze_step", freeze}})
        h5_write_attr(*file, k, static_cast<long long>(v));
      for (auto [k, v] : {std::pair{"lr", kLr}, {"beta1", kBeta1}, {"beta2", kBeta2}, {"eps", eps},
                          {"weight_decay", kWeightDecay}, {"v_floor", v_floor}})
        h5_write_attr(*file, k, std::vector<double>{v});
      h5_write_attr(*file, "layout", layout);
    }
    auto record = [&](hsize_t row) {  // the state after `row` steps
      const auto state = opt.state();
      const torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> ps;
      for (const auto& p : params) ps.push_back(p.param.detach().reshape({-1}));
      const auto worker = gather(rs[0].second, ranks), server = gather(rs[1].second, ranks);
      if (rank != 0) return;
      rows[0].write(row, torch::cat(ps).data_ptr());
      rows[1].write(row, flat(state, "/exp_avg").data_ptr());
      rows[2].write(row, flat(state, "/exp_avg_sq").data_ptr());
      rows[3].write(row, worker.data_ptr());
      rows[4].write(row, server.data_ptr());
    };
    record(0);
    for (int step = 1; step <= steps; ++step) {
      const auto gen = at::make_generator<at::CPUGeneratorImpl>(1000003ULL * step + rank);
      const auto idx = torch::randint(0, s.vocab_size, {kB, kT}, gen, torch::kLong);      // (B, T)
      const auto targets = torch::randint(0, s.vocab_size, {kB, kT}, gen, torch::kLong);  // (B, T)
      for (auto& p : params) p.param.mutable_grad() = torch::Tensor();
      const auto loss = gpt.loss(idx, targets);
      loss.backward();
      std::vector<torch::Tensor> gs;
      for (const auto& p : params) gs.push_back(p.param.grad().reshape({-1}));
      const auto grads = gather(torch::cat(gs), ranks);
      if (!opt.owns_communication()) {  // before the freeze: AdamW on the mean gradient, as the Reducer gives it
        for (auto& p : params) {
          auto g = p.param.grad();
          dp.allreduce_sum(g.data_ptr<float>(), static_cast<std::size_t>(g.numel()), p.name).wait();
          g.div_(static_cast<double>(ranks));
        }
      }
      opt.step(kLr);
      const auto losses = gather(loss.detach().reshape({1}), ranks), idxs = gather(idx, ranks),
                 tgts = gather(targets, ranks);
      if (rank == 0) {
        rows[5].write(static_cast<hsize_t>(step - 1), idxs.data_ptr());
        rows[6].write(static_cast<hsize_t>(step - 1), tgts.data_ptr());
        rows[7].write(static_cast<hsize_t>(step - 1), losses.data_ptr());
        rows[8].write(static_cast<hsize_t>(step - 1), grads.data_ptr());
      }
      record(static_cast<hsize_t>(step));
    }
  }
  MPI_Finalize();
  return 0;
}
