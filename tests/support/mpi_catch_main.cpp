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
  // NCCL needs a GPU of its own per rank: with more ranks on a node than devices, skip.
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local_ranks = 1;
  MPI_Comm_size(node, &local_ranks);
  MPI_Comm_free(&node);
  int enough = gridtrain::cuda_device_count() >= local_ranks ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &enough, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!enough) {
    if (rank == 0)
      std::printf("SKIPPED: fewer CUDA devices than ranks on a node (%d ranks here); the GPU tests need one GPU "
                  "per rank\n", local_ranks);
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
