// One axis of the process grid (dp, tp or pp) as a communicator with axis-named collectives.
// Backends: `mpi` (host buffers, MPI's non-blocking collectives) and `nccl` (device buffers; see
// comm/device_comm.hpp), chosen per axis by attaching a DeviceComm. Every non-blocking operation
// returns a Work handle; waiting on it longer than comm.timeout_s throws CommTimeout naming the
// axis, the operation, its sequence number on the axis and the caller's label (e.g. the
// bucket), instead of hanging.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <mpi.h>

namespace gridtrain {

/// A collective or point-to-point operation that did not complete within comm.timeout_s.
class CommTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A pending operation. wait() blocks until it completes (throwing CommTimeout past the axis
/// timeout); destroying an unfinished Work waits without a timeout, except while an exception
/// unwinds (then the request is abandoned: the job is going down).
class Work {
 public:
  /// A device backend's operation in flight (e.g. a CUDA event after an NCCL call).
  class Pending {
   public:
    virtual ~Pending() = default;
    /// True once complete (and later work on the compute stream is ordered after it); throws
    /// std::runtime_error when the backend reports an error.
    virtual bool test() = 0;
  };

  Work() = default;
  /// waited_s, when given, accumulates the seconds spent in wait() (the axis's wait_s()).
  Work(MPI_Request req, std::string what, double timeout_s, double* waited_s = nullptr)
      : req_(req), what_(std::move(what)), timeout_s_(timeout_s), waited_s_(waited_s) {}
  Work(std::unique_ptr<Pending> pending, std::string what, double timeout_s, double* waited_s = nullptr)
      : pending_(std::move(pending)), what_(std::move(what)), timeout_s_(timeout_s), waited_s_(waited_s) {}
  /// Keeps `held` (what the operation reads until it completes: MPI's count and displacement
  /// arrays, say) alive as long as the Work.
  void hold(std::shared_ptr<const void> held) { held_ = std::move(held); }
  Work(Work&& o) noexcept;
  Work& operator=(Work&& o) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work();
  /// Throws CommTimeout after timeout_s seconds (0 = wait forever); the Work stays pending and
  /// can be waited on again.
  void wait();
  /// Polls the request (MPI_Test, which also lets MPI progress it, or the device backend's
  /// completion); true once it is complete.
  bool test();

 private:
  bool pending() const { return req_ != MPI_REQUEST_NULL || pending_; }
  void wait_pending();

  MPI_Request req_ = MPI_REQUEST_NULL;
  std::unique_ptr<Pending> pending_;
  std::string what_;
  double timeout_s_ = 0;
  double* waited_s_ = nullptr;
  std::shared_ptr<const void> held_;
};

/// Element types of the sums: fp32, and the 2-byte gradients of precision.weights = bf16 | fp16
/// (bfloat16, IEEE half), which MPI sums pairwise in fp32 rounded once per pair to nearest even
/// (comm/half.hpp), as NCCL does.
enum class Element : std::uint8_t { F32, BF16, F16 };
/// Bytes of one element: 4 or 2.
std::size_t bytes_of(Element e);

class DeviceComm;

class Axis {
 public:
  /// Takes ownership of comm (freed on destruction unless it is MPI_COMM_SELF/WORLD).
  /// timeout_s: seconds a Work may take before wait() throws (0 = no limit).
  Axis(std::string name, MPI_Comm comm, double timeout_s = 0);
  ~Axis();
  Axis(const Axis&) = delete;
  Axis& operator=(const Axis&) = delete;

  const std::string& name() const { return name_; }
  int size() const { return size_; }
  int rank() const { return rank_; }
  MPI_Comm comm() const { return comm_; }

  /// From now on the buffer operations below run on `device` (the nccl backend) and take
  /// device pointers. The blocking operations stay on MPI (host scalars).
  void attach(std::unique_ptr<DeviceComm> device);
  /// "mpi" or "nccl".
  const char* backend() const;

  // Non-blocking operations; label says what the data is (e.g. "bucket 3") for error messages.
  // Counts above MPI's int range throw std::runtime_error (mpi backend).

  /// In-place sum over the axis of n elements of `type`.
  Work allreduce_sum(void* data, std::size_t n, Element type, const std::string& label = "");
  Work allreduce_sum(float* data, std::size_t n, const std::string& label = "") {
    return allreduce_sum(data, n, Element::F32, label);
  }
  /// In-place elementwise maximum over the axis of n floats.
  Work allreduce_max(float* data, std::size_t n, const std::string& label = "");
  /// in: size()·n elements of `type`; out: n = the sum over ranks of block rank() of everyone's in.
  Work reduce_scatter_sum(const void* in, void* out, std::size_t n, Element type, const std::string& label = "");
  Work reduce_scatter_sum(const float* in, float* out, std::size_t n, const std::string& label = "") {
    return reduce_scatter_sum(in, out, n, Element::F32, label);
  }
  /// in: bytes from this rank; out: size()·bytes, rank r's block at r·bytes. in may be this
  /// rank's own block of out (in place).
  Work all_gather(const void* in, void* out, std::size_t bytes, const std::string& label = "");
  /// bytes from root to every rank, in place.
  Work broadcast(void* data, std::size_t bytes, int root, const std::string& label = "");
  /// in, out: size()·bytes; block r of in goes to rank r, block r of out comes from rank r.
  Work all_to_all(const void* in, void* out, std::size_t bytes, const std::string& label = "");
  /// Rows of row_bytes each, a different number per peer (MoE token dispatch): in holds
  /// send_rows[r] rows for rank r, rank after rank; out receives recv_rows[r] rows from rank r,
  /// rank after rank. Both counts have size() entries; recv_rows must be what the peers send
  /// (exchanged beforehand with blocking_all_to_all). MPI_Ialltoallv over a contiguous row type;
  /// NCCL: grouped ncclSend/ncclRecv. Counts past MPI's int range throw std::runtime_error.
  Work all_to_all_v(const void* in, const std::vector<std::int64_t>& send_rows, void* out,
                    const std::vector<std::int64_t>& recv_rows, std::size_t row_bytes, const std::string& label = "");
  Work send(const void* data, std::size_t bytes, int peer, int tag, const std::string& label = "");
  Work recv(void* data, std::size_t bytes, int peer, int tag, const std::string& label = "");

  // Blocking operations on host values (losses, norms, counters, flags, timings, metadata),
  // under the same timeout as the non-blocking ones, on MPI whatever the backend. Not counted
  // in bytes_sent().

  /// In-place sum / maximum / minimum over the axis of n doubles.
  void blocking_sum(double* data, int n, const std::string& label = "");
  void blocking_max(double* data, int n, const std::string& label = "");
  void blocking_min(double* data, int n, const std::string& label = "");
  /// in: size()·n values, block r for rank r; out: size()·n, block r from rank r (counts before
  /// an all_to_all_v).
  void blocking_all_to_all(const std::int64_t* in, std::int64_t* out, int n, const std::string& label = "");
  /// Every rank's text, in rank order.
  std::vector<std::string> blocking_gather_text(const std::string& mine, const std::string& label = "");

  /// The ranks of this axis with the same color as a new axis (ordered by key, then rank), named
  /// `name`, with this axis's timeout and backend; nullptr for color MPI_UNDEFINED. Collective.
  std::unique_ptr<Axis> split(int color, int key, std::string name) const;
  /// Seconds this rank has waited in Work::wait() for this axis's operations.
  double wait_s() const { return wait_s_; }

  /// Bytes this rank has sent on the axis by the buffer operations: a ring allreduce sends
  /// 2(p−1)/p of the buffer, reduce-scatter and all-gather (p−1)/p of the whole, all-to-all
  /// (p−1)/p, all_to_all_v the rows to other ranks, a broadcast the buffer (root) or nothing,
  /// send its bytes (the NCCL/MPI ring
  /// algorithms' volumes; Patarasuk & Yuan 2009).
  std::uint64_t bytes_sent() const { return bytes_; }

 private:
  std::string describe(const char* op, const std::string& label);
  std::uint64_t ring_share(std::size_t bytes) const;  // (p−1)/p of bytes
  void blocking_allreduce(double* data, int n, MPI_Op op, const char* name, const std::string& label);
  /// Waits for req, numbered and named like the other operations, under the timeout.
  void finish_blocking(MPI_Request req, const char* op, const std::string& label);
  /// Numbers the operation and posts it: on the device backend with device(DeviceComm&),
  /// which returns its Pending, else with mpi(what, &request).
  template <class Mpi, class Device>
  Work issue(const char* op, const std::string& label, Mpi&& mpi, Device&& device);

  std::string name_;
  MPI_Comm comm_;
  int size_ = 1, rank_ = 0;
  double timeout_s_ = 0;
  unsigned long long seq_ = 0;  // operations issued on this axis
  std::uint64_t bytes_ = 0;
  double wait_s_ = 0;
  std::unique_ptr<DeviceComm> device_;
};

}  // namespace gridtrain
