#include "gridtrain/grid/grid.hpp"

#include "gridtrain/comm/device_comm.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/signals.hpp"

namespace gridtrain {

GridShape resolve_shape(int dp, int tp, int pp, int world_size, int ep, int cp) {
  const std::string with_cp = cp > 1 ? "cp * " : "";
  const std::string given = "grid.dp = " + (dp == 0 ? std::string("auto") : std::to_string(dp)) +
                            ", grid.tp = " + std::to_string(tp) + ", grid.pp = " + std::to_string(pp) +
                            (cp > 1 ? ", grid.cp = " + std::to_string(cp) : "");
  // In 64 bits: sizes up to INT_MAX each multiply without wrapping.
  const long long others = static_cast<long long>(tp) * pp * cp;
  if (dp == 0) {
    if (world_size % others != 0)
      throw Error("process grid: " + given + " cannot fill " + std::to_string(world_size) + " MPI ranks: " + with_cp +
                  "tp * pp = " + std::to_string(others) + " must divide the number of ranks");
    dp = static_cast<int>(world_size / others);
  }
  const long long size = dp * others;
  if (size != world_size)
    throw Error("process grid: " + given + " needs dp * " + with_cp + "tp * pp = " + std::to_string(size) +
                " MPI ranks, but the job has " + std::to_string(world_size) +
                "; launch with mpirun -np " + std::to_string(size) + " or set grid.dp = auto");
  return {dp, tp, pp, ep, cp};
}

int GridShape::operator[](AxisId a) const {
  switch (a) {
    case AxisId::Dp: return dp;
    case AxisId::Tp: return tp;
    case AxisId::Pp: return pp;
    case AxisId::Ep: return ep;
    case AxisId::Cp: return cp;
  }
  return 1;
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
  int dims[kCartDims], periods[kCartDims] = {};
  for (const AxisInfo& a : kAxes)
    if (a.cart_dim >= 0) dims[a.cart_dim] = shape[a.id];
  MPI_Cart_create(world, kCartDims, dims, periods, /*reorder=*/0, &cart_);
  MPI_Comm_rank(cart_, &rank_);
  MPI_Cart_coords(cart_, rank_, kCartDims, coords_.data());
  for (const AxisInfo& a : kAxes)
    if (a.cart_dim >= 0) axes_[index_of(a.id)] = group({a.id}, a.name);
  // dp × cp: ranks dp_rank · cp + cp_rank (Cartesian order, cp the faster).
  if (shape.cp > 1) dp_cp_ = group({AxisId::Dp, AxisId::Cp}, "dp x cp");
  // ep: blocks of ep consecutive dp ranks (the same node first, as tp); expert dp: a stride ep
  // apart, and with cp its cp peers.
  const int d = dp().rank(), c = cp().rank();
  axes_[index_of(AxisId::Ep)] = dp().split(d / shape.ep, d % shape.ep, "ep");
  expert_dp_ = dp_cp().split(d % shape.ep, (d / shape.ep) * shape.cp + c, shape.cp > 1 ? "expert dp x cp" : "expert dp");
  MPI_Comm all;
  MPI_Comm_dup(cart_, &all);
  world_ = std::make_unique<Axis>("world", all, timeout_s);
}

std::unique_ptr<Axis> Grid::group(std::initializer_list<AxisId> axes, std::string name) const {
  int remain[kCartDims] = {};
  for (const AxisId a : axes) remain[kAxes[index_of(a)].cart_dim] = 1;  // Cartesian axes only
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
  dp_cp_.reset();
  expert_dp_.reset();
  world_.reset();
  if (cart_ != MPI_COMM_NULL) MPI_Comm_free(&cart_);
}

void Grid::use_nccl() {
  // world_ carries only host scalars (MPI), so it needs no NCCL communicator.
  for (auto& a : axes_) a->attach(make_nccl_comm(a->comm(), a->name()));
  if (dp_cp_) dp_cp_->attach(make_nccl_comm(dp_cp_->comm(), dp_cp_->name()));
  expert_dp_->attach(make_nccl_comm(expert_dp_->comm(), expert_dp_->name()));
}

std::string Grid::describe() const {
  std::string axes;
  for (const AxisInfo& a : kAxes)
    if (a.cart_dim >= 0 && (a.id != AxisId::Cp || shape_.cp > 1)) axes += std::to_string(shape_[a.id]) + " (" + a.name + ") x ";
  const std::string experts = shape_.ep == 1 ? "" : ", experts over " + std::to_string(shape_.ep) + " (ep) x " +
                                                        std::to_string(expert_dp_->size()) + " (expert dp) inside dp";
  return "Process grid: " + axes.substr(0, axes.size() - 3) + " = " + std::to_string(shape_.size()) + " MPI ranks" +
         experts + ", " + axes_[0]->backend() + " backend";
}

int agree_stop_signal(Axis& world) {
  double sig = received_stop_signal();
  world.blocking_max(&sig, 1, "stop signal");
  return static_cast<int>(sig);
}

}  // namespace gridtrain
