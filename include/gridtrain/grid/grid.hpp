// The 3D process grid: MPI_Cart_create over (pp, dp, tp) with tp fastest, so tensor-parallel
// peers are neighbouring ranks (same node first), then data-parallel replicas, then pipeline
// stages. Each axis gets its own communicator: grid.dp(), grid.tp(), grid.pp().
#pragma once
#include <array>
#include <memory>
#include <string>

#include <mpi.h>

#include "gridtrain/comm/axis.hpp"

namespace gridtrain {

struct GridShape {
  int dp = 1, tp = 1, pp = 1;
  int size() const { return dp * tp * pp; }
};

/// Resolves dp = 0 ("auto") to world / (tp·pp). Throws gridtrain::Error when tp·pp does not
/// divide the world size or the product differs from it, naming the shape and the world size.
GridShape resolve_shape(int dp, int tp, int pp, int world_size);

class Grid {
 public:
  /// Collective over world. shape.size() must equal the size of world (see resolve_shape).
  /// timeout_s: comm.timeout_s of the axes' operations (0 = none).
  Grid(MPI_Comm world, GridShape shape, double timeout_s = 0);

  Axis& dp() { return *dp_; }
  Axis& tp() { return *tp_; }
  Axis& pp() { return *pp_; }
  /// The whole grid as one axis ("world": every rank of the communicator the grid was built on):
  /// step-wide flags and sums (host scalars, always MPI).
  Axis& world() { return *world_; }
  const GridShape& shape() const { return shape_; }
  int rank() const { return rank_; }  ///< rank in the grid (= world) communicator
  MPI_Comm comm() const { return cart_; }
  /// Coordinates of this rank: {pp, dp, tp}.
  std::array<int, 3> coords() const { return coords_; }
  /// Switches the dp, tp and pp axes to the nccl backend (comm/device_comm.hpp): collective over the grid,
  /// on the current CUDA device. Throws std::runtime_error in a CPU build or when NCCL fails.
  void use_nccl();
  /// "Process grid: 2 (dp) x 1 (tp) x 1 (pp) = 2 MPI ranks, mpi backend"
  std::string describe() const;

  ~Grid();
  Grid(const Grid&) = delete;
  Grid& operator=(const Grid&) = delete;

 private:
  GridShape shape_;
  MPI_Comm cart_ = MPI_COMM_NULL;
  int rank_ = 0;
  std::array<int, 3> coords_{};
  std::unique_ptr<Axis> dp_, tp_, pp_, world_;
};

/// Collective over the axis (the whole grid): the stop signal any rank received (the largest;
/// util/signals.hpp), or 0. Under comm.timeout_s, like every step-loop reduction.
int agree_stop_signal(Axis& world);

}  // namespace gridtrain
