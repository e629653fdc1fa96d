// Catch2 (v2) main for every gridtrain test binary: MPI is initialized first (a singleton when
// not launched by mpiexec), and the exit code is the worst over all ranks. Built with
// GRIDTRAIN_TESTS_NEED_CUDA (the GPU tests) it exits 77, which CTest reports as skipped, with a
// message when no CUDA device is visible.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include "gridtrain/util/process_setup.hpp"
#ifdef GRIDTRAIN_TESTS_NEED_CUDA
#include <cstdio>

#include "gridtrain/comm/device_comm.hpp"
#endif

int main(int argc, char** argv) {
  gridtrain::prepare_process();
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);  // as gridtrain (async checkpoints)
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
#ifdef GRIDTRAIN_TESTS_NEED_CUDA
  int have = gridtrain::cuda_available() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!have) {
    if (rank == 0) std::printf("SKIPPED: no CUDA device visible on every rank; the GPU tests need one\n");
    MPI_Finalize();
    return 77;
  }
#endif
  Catch::Session session;
  int code = session.run(argc, argv);
  MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return code;
}
