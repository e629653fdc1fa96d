#include "gridtrain/util/process_setup.hpp"

#include <malloc.h>

#include <cstdlib>

namespace gridtrain {

void prepare_process() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) {
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);  // 1 = ring
  setenv("OMPI_MCA_sharedfp", "^lockedfile", /*overwrite=*/0);
}

}  // namespace gridtrain
