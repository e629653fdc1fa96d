#include "gridtrain/grid/grid.hpp"

#include "gridtrain/comm/device_comm.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/signals.hpp"

namespace gridtrain {

GridShape resolve_shape(int dp, int tp, int pp, int world_size) {
  const std::string given = "grid.dp = " + (dp == 0 ? std::string("auto") : std::to_string(dp)) +
                            ", grid.tp = " + std::to_string(tp) + ", grid.pp = " + std::to_string(pp);
  // In 64 bits: sizes up to INT_MAX each multiply without wrapping.
  const long long tp_pp = static_cast<long long>(tp) * pp;
  if (dp == 0) {
    if (world_size % tp_pp != 0)
      throw Error("process grid: " + given + " cannot fill " + std::to_string(world_size) +
                  " MPI ranks: tp * pp = " + std::to_string(tp_pp) + " must divide the number of ranks");
    dp = static_cast<int>(world_size / tp_pp);
  }
  const long long size = dp * tp_pp;
  if (size != world_size)
    throw Error("process grid: " + given + " needs dp * tp * pp = " + std::to_string(size) +
                " MPI ranks, but the job has " + std::to_string(world_size) +
                "; launch with mpirun -np " + std::to_string(size) + " or set grid.dp = auto");
  return {dp, tp, pp};
}

Grid::Grid(MPI_Comm world, GridShape shape, double timeout_s) : shape_(shape) {
  int dims[3] = {shape.pp, shape.dp, shape.tp};  // last dimension varies fastest
  int periods[3] = {0, 0, 0};
  MPI_Cart_create(world, 3, dims, periods, /*reorder=*/0, &cart_);
  MPI_Comm_rank(cart_, &rank_);
  MPI_Cart_coords(cart_, rank_, 3, coords_.data());
  auto sub = [this](int pp, int dp, int tp) {
    int remain[3] = {pp, dp, tp};
    MPI_Comm c;
    MPI_Cart_sub(cart_, remain, &c);
    return c;
  };
  pp_ = std::make_unique<Axis>("pp", sub(1, 0, 0), timeout_s);
  dp_ = std::make_unique<Axis>("dp", sub(0, 1, 0), timeout_s);
  tp_ = std::make_unique<Axis>("tp", sub(0, 0, 1), timeout_s);
  MPI_Comm all;
  MPI_Comm_dup(cart_, &all);
  world_ = std::make_unique<Axis>("world", all, timeout_s);
}

Grid::~Grid() {
  dp_.reset();
  tp_.reset();
  pp_.reset();
  world_.reset();
  if (cart_ != MPI_COMM_NULL) MPI_Comm_free(&cart_);
}

void Grid::use_nccl() {
  // world_ carries only host scalars (MPI), so it needs no NCCL communicator.
  for (Axis* a : {dp_.get(), tp_.get(), pp_.get()}) a->attach(make_nccl_comm(a->comm(), a->name()));
}

std::string Grid::describe() const {
  return "Process grid: " + std::to_string(shape_.dp) + " (dp) x " + std::to_string(shape_.tp) + " (tp) x " +
         std::to_string(shape_.pp) + " (pp) = " + std::to_string(shape_.size()) + " MPI ranks, " + dp_->backend() +
         " backend";
}

int agree_stop_signal(Axis& world) {
  double sig = received_stop_signal();
  world.blocking_max(&sig, 1, "stop signal");
  return static_cast<int>(sig);
}

}  // namespace gridtrain
