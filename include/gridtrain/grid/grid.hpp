// The process grid: MPI_Cart_create over its axes, slowest first: pipeline stages, data-parallel
// replicas, context-parallel peers, tensor-parallel peers (fastest, so that they are neighbouring
// ranks, the same node first; Megatron-Core's tp-cp-dp-pp order). The axes are data (kAxes): each
// gets its own communicator (grid.axis(id); grid.dp(), tp(), pp(), ep(), cp()), its timer section
// and traffic column, its figures in the summary,
// summary.json, the checkpoint's "grid" attribute and --dry-run. A new axis is one more entry in
// AxisId and kAxes, plus its region in the model (as parallel/tensor_parallel.hpp's TpRegion is
// for tp). Groups that span or split axes (G23's dp × cp) are derived with Grid::group and
// Axis::split.
//
// Context parallelism (G23) splits each sequence over cp ranks (parallel/context_parallel.hpp):
// the cp ranks of a replica read the same samples and hold the same parameters, so the dense
// gradients average and ZeRO shards over dp × cp (grid.dp_cp(), Megatron-Core's data-parallel
// group with context parallelism), and the experts' over expert dp × cp.
//
// Expert parallelism (G22) splits dp rather than adding to the product: the ep axis is ep
// consecutive dp ranks, which hold different experts of each MoE layer, and its complement, the
// expert-data-parallel group (grid.expert_dp(), dp / ep ranks a stride ep apart), holds the same
// experts and averages their gradients (Megatron-Core's expert_data_parallel group).
#pragma once
#include <array>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>

#include <mpi.h>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/util/timer.hpp"

namespace gridtrain {

enum class AxisId { Dp, Tp, Pp, Ep, Cp };

/// One grid axis: how it is spelled (deck keys grid.<name>, logs, files), its place in the
/// Cartesian grid (0 = slowest; -1: a split of dp, not a dimension of its own), the timer section its communication is charged to, and whether
/// its collectives run inside forward/backward (the step moves their waits out of Compute).
struct AxisInfo {
  AxisId id;
  const char* name;
  int cart_dim;
  Section comm;
  bool in_compute;
};

/// The grid's axes in the order they are reported (dp, tp, pp, ep, cp: "2 (dp) x 1 (tp) x 1 (pp)",
/// summary.json, the checkpoint's "grid" attribute), which is also AxisId's order. dp's waits
/// are the gradient exchange's (the Reducer, after backward), pp's the pipeline engine's own,
/// ep's the token dispatch's all-to-alls and cp's the ring attention's transfers, both inside
/// forward/backward.
inline constexpr std::array<AxisInfo, 5> kAxes = {{{AxisId::Dp, "dp", 1, Section::DpComm, false},
                                                   {AxisId::Tp, "tp", 3, Section::TpComm, true},
                                                   {AxisId::Pp, "pp", 0, Section::PpComm, false},
                                                   {AxisId::Ep, "ep", -1, Section::EpComm, true},
                                                   {AxisId::Cp, "cp", 2, Section::CpComm, true}}};
inline constexpr int kCartDims = 4;  ///< the axes with a Cartesian dimension (cart_dim >= 0)
inline constexpr std::size_t kAxisCount = kAxes.size();
inline constexpr std::size_t index_of(AxisId a) { return static_cast<std::size_t>(a); }

/// A figure per axis, in kAxes order (bytes sent, sizes).
template <class T>
using PerAxis = std::array<T, kAxisCount>;

struct GridShape {
  int dp = 1, tp = 1, pp = 1;
  int ep = 1;  ///< expert-parallel ranks, a divisor of dp (inside it: not a factor of size())
  int cp = 1;  ///< context-parallel ranks: each sequence split over them
  int size() const { return dp * cp * tp * pp; }
  /// The ranks that hold the same dense parameters: dp · cp.
  int replicas() const { return dp * cp; }
  /// The axis's size.
  int operator[](AxisId a) const;
  /// "2,1,1,1,1": each axis's size in kAxes order (the checkpoint's "grid" attribute).
  std::string csv() const;
};

/// Resolves dp = 0 ("auto") to world / (cp·tp·pp). Throws gridtrain::Error when cp·tp·pp does
/// not divide the world size or the product differs from it, naming the shape and the world size.
/// ep is taken as given (plan_launch checks that it divides dp, among the deck's other problems).
GridShape resolve_shape(int dp, int tp, int pp, int world_size, int ep = 1, int cp = 1);

class Grid {
 public:
  /// Collective over world. shape.size() must equal the size of world (see resolve_shape).
  /// timeout_s: comm.timeout_s of the axes' operations (0 = none).
  Grid(MPI_Comm world, GridShape shape, double timeout_s = 0);

  Axis& axis(AxisId a) { return *axes_[index_of(a)]; }
  const Axis& axis(AxisId a) const { return *axes_[index_of(a)]; }
  Axis& dp() { return axis(AxisId::Dp); }
  Axis& tp() { return axis(AxisId::Tp); }
  Axis& pp() { return axis(AxisId::Pp); }
  Axis& ep() { return axis(AxisId::Ep); }
  Axis& cp() { return axis(AxisId::Cp); }
  /// The dense parameters' replicas, dp × cp (rank dp_rank · cp + cp_rank): over it dense
  /// gradients average and ZeRO shards. dp itself when cp = 1.
  Axis& dp_cp() { return dp_cp_ ? *dp_cp_ : dp(); }
  const Axis& dp_cp() const { return dp_cp_ ? *dp_cp_ : axis(AxisId::Dp); }
  /// The expert-data-parallel group: the dp ranks with this one's place on ep (dp / ep ranks),
  /// times cp, over which the experts' gradients average. dp_cp() itself when ep = 1.
  Axis& expert_dp() { return *expert_dp_; }
  const Axis& expert_dp() const { return *expert_dp_; }
  /// The whole grid as one axis ("world": every rank of the communicator the grid was built on):
  /// step-wide flags and sums (host scalars, always MPI).
  Axis& world() { return *world_; }
  const GridShape& shape() const { return shape_; }
  int rank() const { return rank_; }  ///< rank in the grid (= world) communicator
  MPI_Comm comm() const { return cart_; }
  /// Coordinates of this rank in Cartesian order: {pp, dp, cp, tp}.
  std::array<int, kCartDims> coords() const { return coords_; }
  /// The replica role: whether this rank speaks for the ranks that differ from it only along
  /// `axes`, i.e. it is rank 0 on each. A figure those ranks hold alike (a loss, a replicated
  /// tensor) is counted, written or printed by it alone, so that a sum over the grid counts it once.
  bool represents(std::initializer_list<AxisId> axes) const;
  /// A derived group: the ranks that differ from this one only along `axes` (e.g. dp × cp over
  /// which dense gradients reduce), named `name`, with the axes' timeout. Collective over the grid.
  std::unique_ptr<Axis> group(std::initializer_list<AxisId> axes, std::string name) const;
  /// Switches every axis to the nccl backend (comm/device_comm.hpp): collective over the grid,
  /// on the current CUDA device. Throws std::runtime_error in a CPU build or when NCCL fails.
  void use_nccl();
  /// "Process grid: 2 (dp) x 1 (tp) x 1 (pp) = 2 MPI ranks, mpi backend" (cp named when > 1)
  std::string describe() const;

  ~Grid();
  Grid(const Grid&) = delete;
  Grid& operator=(const Grid&) = delete;

 private:
  GridShape shape_;
  MPI_Comm cart_ = MPI_COMM_NULL;
  int rank_ = 0;
  double timeout_s_;
  std::array<int, kCartDims> coords_{};
  PerAxis<std::unique_ptr<Axis>> axes_;
  std::unique_ptr<Axis> dp_cp_, expert_dp_, world_;
};

/// Collective over the axis (the whole grid): the stop signal any rank received (the largest;
/// util/signals.hpp), or 0. Under comm.timeout_s, like every step-loop reduction.
int agree_stop_signal(Axis& world);

}  // namespace gridtrain
