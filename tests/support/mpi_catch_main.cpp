// Catch2 (v2) main for every gridtrain test binary: MPI is initialized first (a singleton when
// not launched by mpiexec), and the exit code is the worst over all ranks.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include "gridtrain/util/process_setup.hpp"

int main(int argc, char** argv) {
  gridtrain::prepare_process();
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);  // as gridtrain (async checkpoints)
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Catch::Session session;
  int code = session.run(argc, argv);
  MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return code;
}
