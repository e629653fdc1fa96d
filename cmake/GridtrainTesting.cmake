# Test registration helpers.
#   gridtrain_add_mpi_test(NAME NPROCS COMMAND...) runs COMMAND under mpiexec -n NPROCS
#   (oversubscribed, so 8 ranks run on 2 cores).
set(GRIDTRAIN_MPI_ENV
  "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_mpi_yield_when_idle=1;OMP_NUM_THREADS=1")
# In the cuda build every test runs on the CUDA LibTorch's binaries: they need the libraries that
# LibTorch's wheel brings and the toolkit lacks (ahead of the caller's library path), and, where
# no driver is installed, its stub, so that they load. The GPU tests (GRIDTRAIN_GPU_ENV) use the
# GPUs; every other test hides them (CUDA_VISIBLE_DEVICES empty) and so runs the CPU suite on
# LibTorch 2.x's kernels whatever GPUs the machine has.
set(GRIDTRAIN_GPU_ENV "${GRIDTRAIN_MPI_ENV}")
if(GRIDTRAIN_CUDA)
  set(gpu_libs "${GRIDTRAIN_CUDA_EXTRA_LIB}:${CUDAToolkit_LIBRARY_DIR}")
  find_library(GRIDTRAIN_CUDA_DRIVER NAMES libcuda.so.1 cuda NO_CACHE PATHS /usr/lib/x86_64-linux-gnu /usr/lib64
               NO_DEFAULT_PATH)
  if(NOT GRIDTRAIN_CUDA_DRIVER)
    string(APPEND gpu_libs ":${GRIDTRAIN_CUDA_EXTRA_LIB}/driver-stub")
  endif()
  if(DEFINED ENV{LD_LIBRARY_PATH})
    string(APPEND gpu_libs ":$ENV{LD_LIBRARY_PATH}")
  endif()
  string(APPEND GRIDTRAIN_GPU_ENV ";LD_LIBRARY_PATH=${gpu_libs}")
  string(APPEND GRIDTRAIN_MPI_ENV ";LD_LIBRARY_PATH=${gpu_libs};CUDA_VISIBLE_DEVICES=")
endif()

function(gridtrain_add_mpi_test name nprocs)
  add_test(NAME ${name}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nprocs} --oversubscribe ${MPIEXEC_PREFLAGS} ${ARGN})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${GRIDTRAIN_MPI_ENV}" TIMEOUT 300 PROCESSORS ${nprocs}
                                          LABELS mpi)
endfunction()

# A plain (single-process) test that still initializes MPI as a singleton.
function(gridtrain_add_test name)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${GRIDTRAIN_MPI_ENV}" TIMEOUT 120)
endfunction()
