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

std::string GridShape::csv() const {
  std::string out;
  for (const AxisInfo& a : kAxes) {
    if (!out.empty()) out += ',';
    out += std::to_string((*this)[a.id]);
  }
  return out;
}

Grid::Grid(MPI_Comm world, GridShape shape, double timeout_s) : shape_(shape), timeout_s_(timeout_s) {
  int dims[kAxisCount], periods[kAxisCount] = {};
  for (const AxisInfo& a : kAxes) dims[a.cart_dim] = shape[a.id];
  MPI_Cart_create(world, static_cast<int>(kAxisCount), dims, periods, /*reorder=*/0, &cart_);
  MPI_Comm_rank(cart_, &rank_);
  MPI_Cart_coords(cart_, rank_, static_cast<int>(kAxisCount), coords_.data());
  for (const AxisInfo& a : kAxes) axes_[index_of(a.id)] = group({a.id}, a.name);
  MPI_Comm all;
  MPI_Comm_dup(cart_, &all);
  world_ = std::make_unique<Axis>("world", all, timeout_s);
}

std::unique_ptr<Axis> Grid::group(std::initializer_list<AxisId> axes, std::string name) const {
  int remain[kAxisCount] = {};
  for (const AxisId a : axes) remain[kAxes[index_of(a)].cart_dim] = 1;
  MPI_Comm c;
  MPI_Cart_sub(cart_, remain, &c);
  return std::make_unique<Axis>(std::move(name), c, timeout_s_);
}

bool Grid::represents(std::initializer_list<AxisId> axes) const {
  for (const AxisId a : axes)
    if (axis(a).rank() != 0) return false;
  return true;
}

Grid::~Grid() {
  for (auto& a : axes_) a.reset();
  world_.reset();
  if (cart_ != MPI_COMM_NULL) MPI_Comm_free(&cart_);
}

void Grid::use_nccl() {
  // world_ carries only host scalars (MPI), so it needs no NCCL communicator.
  for (auto& a : axes_) a->attach(make_nccl_comm(a->comm(), a->name()));
}

std::string Grid::describe() const {
  std::string axes;
  for (const AxisInfo& a : kAxes) axes += std::to_string(shape_[a.id]) + " (" + a.name + ") x ";
  return "Process grid: " + axes.substr(0, axes.size() - 3) + " = " + std::to_string(shape_.size()) + " MPI ranks, " +
         axes_[0]->backend() + " backend";
}

int agree_stop_signal(Axis& world) {
  double sig = received_stop_signal();
  world.blocking_max(&sig, 1, "stop signal");
  return static_cast<int>(sig);
}

}  // namespace gridtrain
