#include "gridtrain/comm/axis.hpp"

#include <climits>
#include <stdexcept>

namespace gridtrain {

Work& Work::operator=(Work&& o) noexcept {
  if (this != &o) {
    wait();
    req_ = o.req_;
    o.req_ = MPI_REQUEST_NULL;
  }
  return *this;
}

void Work::wait() {
  if (req_ != MPI_REQUEST_NULL) MPI_Wait(&req_, MPI_STATUS_IGNORE);
}

bool Work::test() {
  int done = 1;
  if (req_ != MPI_REQUEST_NULL) MPI_Test(&req_, &done, MPI_STATUS_IGNORE);
  return done != 0;
}

Axis::Axis(std::string name, MPI_Comm comm) : name_(std::move(name)), comm_(comm) {
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

Axis::~Axis() {
  if (comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Work Axis::allreduce_sum(float* data, std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::runtime_error("allreduce on axis " + name_ + ": " + std::to_string(n) +
                             " elements exceed MPI's int count; use a smaller comm.bucket_mb");
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_, &req);
  return Work(req);
}

void Axis::allreduce_sum(double* data, int n) {
  MPI_Allreduce(MPI_IN_PLACE, data, n, MPI_DOUBLE, MPI_SUM, comm_);
}

}  // namespace gridtrain
