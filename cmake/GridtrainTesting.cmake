# Test registration helpers.
#   gridtrain_add_mpi_test(NAME NPROCS COMMAND...) runs COMMAND under mpiexec -n NPROCS
#   (oversubscribed, so 8 ranks run on 2 cores).
#   gridtrain_add_run_test(NAME ... COMMAND...) any other test, with the same environment (below).
set(GRIDTRAIN_MPI_ENV
  "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_mpi_yield_when_idle=1;OMP_NUM_THREADS=1")
# The GPU tests (GRIDTRAIN_GPU_ENV) use the GPUs; where the GPU path is built every other test
# hides them (CUDA_VISIBLE_DEVICES empty) and so is the CPU suite whatever GPUs the machine has.
set(GRIDTRAIN_GPU_ENV "${GRIDTRAIN_MPI_ENV}")
if(GRIDTRAIN_CUDA)
  string(APPEND GRIDTRAIN_MPI_ENV ";CUDA_VISIBLE_DEVICES=")
endif()

function(gridtrain_add_mpi_test name nprocs)
  add_test(NAME ${name}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${nprocs} --oversubscribe ${MPIEXEC_PREFLAGS} ${ARGN})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${GRIDTRAIN_MPI_ENV}" TIMEOUT 300 PROCESSORS ${nprocs}
                                          LABELS mpi)
endfunction()

# A test that runs programs (gridtrain, mpiexec, the regression scripts) with the MPI environment:
#   gridtrain_add_run_test(NAME [CORPUS] [SERIAL] [TIMEOUT s] [PROCESSORS n] [LABELS l...]
#                          [WORKING_DIRECTORY dir] COMMAND ...)
# CORPUS: needs the small KJV corpus (fixture corpus); SERIAL: runs alone (timed work). TIMEOUT
# defaults to 60 s.
function(gridtrain_add_run_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "CORPUS;SERIAL" "TIMEOUT;PROCESSORS;WORKING_DIRECTORY" "LABELS;COMMAND")
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 60)
  endif()
  if(arg_WORKING_DIRECTORY)
    add_test(NAME ${name} COMMAND ${arg_COMMAND} WORKING_DIRECTORY ${arg_WORKING_DIRECTORY})
  else()
    add_test(NAME ${name} COMMAND ${arg_COMMAND})
  endif()
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${GRIDTRAIN_MPI_ENV}" TIMEOUT ${arg_TIMEOUT})
  if(arg_CORPUS)
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED corpus)
  endif()
  if(arg_SERIAL)
    set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
  if(arg_PROCESSORS)
    set_tests_properties(${name} PROPERTIES PROCESSORS ${arg_PROCESSORS})
  endif()
  if(arg_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${arg_LABELS}")
  endif()
endfunction()
