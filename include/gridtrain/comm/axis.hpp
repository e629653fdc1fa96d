// One axis of the process grid (dp, tp or pp) as a communicator with axis-named collectives.
// CPU backend: MPI on host buffers. Non-blocking collectives return a Work handle to wait on.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include <mpi.h>

namespace gridtrain {

/// A pending collective. wait() blocks until it completes; destroying an unfinished Work waits.
class Work {
 public:
  Work() = default;
  explicit Work(MPI_Request req) : req_(req) {}
  Work(Work&& o) noexcept : req_(o.req_) { o.req_ = MPI_REQUEST_NULL; }
  Work& operator=(Work&& o) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work() { wait(); }
  void wait();
  /// Polls the request (MPI_Test), which also lets MPI progress it; true once it is complete.
  bool test();

 private:
  MPI_Request req_ = MPI_REQUEST_NULL;
};

class Axis {
 public:
  /// Takes ownership of comm (freed on destruction unless it is MPI_COMM_SELF/WORLD).
  Axis(std::string name, MPI_Comm comm);
  ~Axis();
  Axis(const Axis&) = delete;
  Axis& operator=(const Axis&) = delete;

  const std::string& name() const { return name_; }
  int size() const { return size_; }
  int rank() const { return rank_; }
  MPI_Comm comm() const { return comm_; }

  /// Sum-allreduce of n floats in place, non-blocking (MPI_Iallreduce). Throws
  /// std::runtime_error when n exceeds MPI's int count.
  Work allreduce_sum(float* data, std::size_t n);
  /// Blocking sum-allreduce of a few doubles in place (losses, norms, counters).
  void allreduce_sum(double* data, int n);

 private:
  std::string name_;
  MPI_Comm comm_;
  int size_ = 1, rank_ = 0;
};

}  // namespace gridtrain
