// Run under mpiexec -n 8: the grid builds every 3D shape with tp fastest.
#include <catch2/catch.hpp>

#include "gridtrain/grid/grid.hpp"
#include "gridtrain/util/error.hpp"

using namespace gridtrain;

namespace {
// Sorted world ranks of the members of an axis, gathered over that axis.
std::vector<int> members(Axis& axis, int world_rank) {
  std::vector<int> out(axis.size());
  MPI_Allgather(&world_rank, 1, MPI_INT, out.data(), 1, MPI_INT, axis.comm());
  return out;
}
}  // namespace

TEST_CASE("grid coordinates and axis sizes for 8-rank shapes", "[np8]") {
  int world = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  REQUIRE(world == 8);
  for (auto [dp, tp, pp] : {std::tuple{8, 1, 1}, {2, 2, 2}, {1, 2, 4}, {2, 4, 1}}) {
    Grid g(MPI_COMM_WORLD, resolve_shape(dp, tp, pp, world));
    CAPTURE(dp, tp, pp, rank);
    CHECK(g.dp().size() == dp);
    CHECK(g.tp().size() == tp);
    CHECK(g.pp().size() == pp);
    // rank = (pp_coord · dp + dp_coord) · tp + tp_coord
    const auto c = g.coords();
    CHECK(c[0] == rank / (dp * tp));
    CHECK(c[1] == (rank / tp) % dp);
    CHECK(c[2] == 0);  // cp = 1
    CHECK(c[3] == rank % tp);
    CHECK(g.tp().rank() == c[3]);
    CHECK(g.dp().rank() == c[1]);
    CHECK(g.pp().rank() == c[0]);
    // tp peers are consecutive ranks; dp peers are tp apart; pp peers dp·tp apart.
    const auto tpm = members(g.tp(), rank), dpm = members(g.dp(), rank), ppm = members(g.pp(), rank);
    for (int i = 0; i < tp; ++i) CHECK(tpm[i] == rank - c[3] + i);
    for (int i = 0; i < dp; ++i) CHECK(dpm[i] == rank - c[1] * tp + i * tp);
    for (int i = 0; i < pp; ++i) CHECK(ppm[i] == rank - c[0] * dp * tp + i * dp * tp);
  }
  CHECK(Grid(MPI_COMM_WORLD, resolve_shape(0, 2, 2, world)).describe() ==
        "Process grid: 2 (dp) x 2 (tp) x 2 (pp) = 8 MPI ranks, mpi backend");
}

TEST_CASE("grid.ep splits dp: ep peers are consecutive dp ranks, expert-dp peers ep apart", "[np8]") {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (auto [dp, tp, ep] : {std::tuple{8, 1, 2}, {8, 1, 4}, {4, 2, 2}, {8, 1, 8}, {8, 1, 1}}) {
    CAPTURE(dp, tp, ep, rank);
    Grid g(MPI_COMM_WORLD, resolve_shape(dp, tp, 1, 8, ep));
    CHECK(g.shape().size() == 8);  // ep is inside dp, not a factor of the world
    CHECK(g.ep().size() == ep);
    CHECK(g.expert_dp().size() == dp / ep);
    const int d = g.dp().rank();
    CHECK(g.ep().rank() == d % ep);
    CHECK(g.expert_dp().rank() == d / ep);
    const auto epm = members(g.ep(), rank), edpm = members(g.expert_dp(), rank);
    for (int i = 0; i < ep; ++i) CHECK(epm[i] == rank + (i - d % ep) * tp);
    for (int i = 0; i < dp / ep; ++i) CHECK(edpm[i] == rank + (i - d / ep) * ep * tp);
  }
  CHECK(Grid(MPI_COMM_WORLD, resolve_shape(0, 1, 1, 8, 4)).describe() ==
        "Process grid: 8 (dp) x 1 (tp) x 1 (pp) = 8 MPI ranks, experts over 4 (ep) x 2 (expert dp) inside dp, mpi backend");
}

TEST_CASE("grid.cp sits between dp and tp: cp peers tp apart, dp x cp their union, expert dp x cp", "[np8]") {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (auto [dp, tp, pp, cp, ep] : {std::array{2, 1, 1, 4, 1}, {2, 2, 1, 2, 2}, {1, 2, 2, 2, 1}, {4, 1, 1, 2, 2}}) {
    CAPTURE(dp, tp, pp, cp, ep, rank);
    Grid g(MPI_COMM_WORLD, resolve_shape(0, tp, pp, 8, ep, cp));
    CHECK(g.shape().dp == dp);
    CHECK(g.cp().size() == cp);
    // rank = ((pp_coord · dp + dp_coord) · cp + cp_coord) · tp + tp_coord
    const auto c = g.coords();
    CHECK(c[0] == rank / (dp * cp * tp));
    CHECK(c[1] == (rank / (cp * tp)) % dp);
    CHECK(c[2] == (rank / tp) % cp);
    CHECK(c[3] == rank % tp);
    CHECK(g.cp().rank() == c[2]);
    const auto cpm = members(g.cp(), rank), dpm = members(g.dp(), rank), both = members(g.dp_cp(), rank);
    for (int i = 0; i < cp; ++i) CHECK(cpm[i] == rank + (i - c[2]) * tp);
    for (int i = 0; i < dp; ++i) CHECK(dpm[i] == rank + (i - c[1]) * cp * tp);
    REQUIRE(g.dp_cp().size() == dp * cp);
    CHECK(g.dp_cp().rank() == c[1] * cp + c[2]);
    for (int i = 0; i < dp * cp; ++i) CHECK(both[i] == rank - (c[1] * cp + c[2]) * tp + i * tp);
    CHECK(g.expert_dp().size() == dp / ep * cp);  // the experts' replicas: a stride ep apart on dp, every cp rank
    for (int r : members(g.expert_dp(), rank)) CHECK((r / (cp * tp)) % dp % ep == c[1] % ep);
  }
  CHECK(Grid(MPI_COMM_WORLD, resolve_shape(0, 2, 1, 8, 1, 2)).describe() ==
        "Process grid: 2 (dp) x 2 (tp) x 1 (pp) x 2 (cp) = 8 MPI ranks, mpi backend");
  CHECK_THROWS_WITH(resolve_shape(0, 1, 1, 8, 1, 3), Catch::Contains("cp * tp * pp = 3 must divide"));
}

TEST_CASE("grid shapes that do not fill the world are rejected", "[np8]") {
  CHECK_THROWS_WITH(resolve_shape(3, 1, 1, 8), Catch::Contains("needs dp * tp * pp = 3 MPI ranks, but the job has 8"));
  CHECK_THROWS_WITH(resolve_shape(0, 3, 1, 8), Catch::Contains("tp * pp = 3 must divide"));
  CHECK(resolve_shape(0, 2, 1, 8).dp == 4);
}
