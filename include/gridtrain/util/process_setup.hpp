// Process-wide settings gridtrain makes before MPI_Init (the program, benchmarks and tests
// share them so that they measure and test what runs):
//  - glibc keeps large activation buffers on the heap (M_MMAP_THRESHOLD 256 MiB, M_TRIM_THRESHOLD
//    1 GiB) instead of mmapping and page-faulting them anew each step; with Open MPI loaded the
//    adaptive threshold stays low and a step spent ~15 % in the kernel (docs/performance.md);
//  - Open MPI's non-blocking allreduce (libnbc) uses the ring algorithm, bandwidth-optimal and
//    as fast as the tuned blocking MPI_Allreduce here; its default ran at 0.5x (bench/);
//  - OMPIO leaves out the lockedfile shared-file-pointer component: gridtrain never uses shared
//    file pointers, and that component's probe creates and deletes "<file>.locktest.<rank>" beside
//    every checkpoint at every open, one file per rank (metadata load on Lustre/GPFS, and on a
//    filesystem out of inodes it took the last one, failing the open with EBADF).
// Settings already present in the environment (MALLOC_MMAP_THRESHOLD_,
// OMPI_MCA_coll_libnbc_iallreduce_algorithm, OMPI_MCA_sharedfp) win.
#pragma once

namespace gridtrain {

/// Call first thing in main(), before MPI_Init.
void prepare_process();

}  // namespace gridtrain
