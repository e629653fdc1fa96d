# Third-party packages. Each failure says which package provides what is missing.

include(GridtrainTorch)  # LibTorch 2.x; resolves GRIDTRAIN_CUDA=AUTO

find_package(MPI REQUIRED COMPONENTS C)
# We use the C API only; keep the deprecated MPI C++ bindings out of every translation unit.
add_compile_definitions(OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR
    "gridtrain needs the parallel (MPI) build of HDF5, but found a serial one "
    "(${HDF5_C_LIBRARIES}). On Debian/Ubuntu: apt-get install libhdf5-openmpi-dev; on a "
    "cluster: load the parallel HDF5 module or set HDF5_ROOT to a --enable-parallel install.")
endif()

find_package(Boost 1.71 REQUIRED COMPONENTS program_options)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)  # SHA-256 of prepared corpora
find_package(ZLIB REQUIRED)  # gzipped IDX image sets (prepare idx)
find_package(nlohmann_json 3.10 REQUIRED)  # safetensors headers and transformers configs (export, import)
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
# SentencePiece (Google's C++ library; Debian libsentencepiece-dev): prepare --tokenizer
# sentencepiece, its training, and decoding in `gridtrain generate`.
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
# Zstandard (Debian libzstd-dev): prepare jsonl reads .jsonl.zst.
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)

# The GPU path: nvcc for the compression kernels, NCCL for the device backend, from the CUDA
# toolkit (/usr/local/cuda); LibTorch must be a CUDA build (PyPI's wheel is).
if(GRIDTRAIN_CUDA)
  find_package(CUDAToolkit REQUIRED)
  if(NOT TARGET torch_cuda)
    message(FATAL_ERROR "GRIDTRAIN_CUDA needs a CUDA build of LibTorch, but ${GRIDTRAIN_TORCH_ROOT} is a "
                        "CPU build: use PyPI's torch wheel (scripts/install-deps) or GRIDTRAIN_CUDA=OFF.")
  endif()
  # One process can hold only one libnccl.so.2: gridtrain takes the one LibTorch loads (the
  # wheel's nvidia-nccl where pip brought it, else the toolkit's). The header is the toolkit's.
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
               HINTS "${GRIDTRAIN_TORCH_ROOT}/../nvidia/nccl" ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    message(FATAL_ERROR "GRIDTRAIN_CUDA needs NCCL (nccl.h, libnccl.so): install it with the CUDA "
                        "toolkit or set NCCL_HOME.")
  endif()
  # The driver library is not part of the toolkit; LibTorch's NVRTC shim needs it by its soname.
  # For linking where no driver is installed: its stub under that name (nothing loads it).
  set(GRIDTRAIN_DRIVER_STUB_DIR "${PROJECT_BINARY_DIR}/driver-stub")
  file(MAKE_DIRECTORY "${GRIDTRAIN_DRIVER_STUB_DIR}")
  file(CREATE_LINK "${CUDAToolkit_LIBRARY_DIR}/stubs/libcuda.so" "${GRIDTRAIN_DRIVER_STUB_DIR}/libcuda.so.1" SYMBOLIC)
  add_link_options("LINKER:-rpath-link,${GRIDTRAIN_DRIVER_STUB_DIR}:${CUDAToolkit_LIBRARY_DIR}")
endif()
