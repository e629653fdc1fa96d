#include "gridtrain/comm/axis.hpp"

#include "gridtrain/comm/device_comm.hpp"
#include "gridtrain/comm/half.hpp"
#include "gridtrain/util/timer.hpp"

#include <sched.h>

#include <climits>
#include <exception>
#include <new>
#include <stdexcept>
#include <cstdio>
#include <thread>
#include <utility>

namespace gridtrain {
namespace {

int checked_count(std::size_t n, const std::string& what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::runtime_error(what + ": " + std::to_string(n) + " elements exceed MPI's int count; use a smaller "
                             "comm.bucket_mb");
  return static_cast<int>(n);
}

// MPI has no 2-byte floating sum: user-defined ops over MPI_UINT16_T bit patterns.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  sum_bf16(static_cast<const std::uint16_t*>(in), static_cast<std::uint16_t*>(inout), static_cast<std::size_t>(*len));
}

void fp16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  sum_fp16(static_cast<const std::uint16_t*>(in), static_cast<std::uint16_t*>(inout), static_cast<std::size_t>(*len));
}

// The MPI datatype and sum of `type`; the user-defined ops are created once, on first use (after
// MPI_Init), and live until MPI_Finalize.
std::pair<MPI_Datatype, MPI_Op> mpi_sum(Element type) {
  auto create = [](MPI_User_function* f) {
    MPI_Op op = MPI_OP_NULL;
    MPI_Op_create(f, /*commute=*/1, &op);
    return op;
  };
  static const MPI_Op bf16 = create(bf16_sum), fp16 = create(fp16_sum);
  switch (type) {
    case Element::BF16: return {MPI_UINT16_T, bf16};
    case Element::F16: return {MPI_UINT16_T, fp16};
    case Element::F32: break;
  }
  return {MPI_FLOAT, MPI_SUM};
}

}  // namespace

std::size_t bytes_of(Element e) { return e == Element::F32 ? 4 : 2; }

Work::Work(Work&& o) noexcept
    : req_(std::exchange(o.req_, MPI_REQUEST_NULL)), pending_(std::move(o.pending_)), what_(std::move(o.what_)),
      timeout_s_(o.timeout_s_), waited_s_(o.waited_s_), held_(std::move(o.held_)) {}

Work& Work::operator=(Work&& o) noexcept {
  if (this != &o) {
    this->~Work();
    new (this) Work(std::move(o));
  }
  return *this;
}

Work::~Work() {
  // While an exception (a CommTimeout, say) unwinds, the operation may never complete: leave it,
  // the job is about to be aborted.
  if (!pending() || std::uncaught_exceptions() != 0) return;
  if (req_ != MPI_REQUEST_NULL) MPI_Wait(&req_, MPI_STATUS_IGNORE);
  try {
    while (pending_ && !pending_->test()) sched_yield();
  } catch (const std::exception&) {
    // A device error surfaces at the next synchronizing call; a destructor must not throw.
  }
}

void Work::wait() {
  if (!pending()) return;
  const Stopwatch waited;
  wait_pending();
  if (waited_s_) *waited_s_ += waited.seconds();
}

void Work::wait_pending() {
  if (timeout_s_ <= 0 && req_ != MPI_REQUEST_NULL) {
    MPI_Wait(&req_, MPI_STATUS_IGNORE);
    return;
  }
  // Poll, backing off from spinning to short sleeps so that a waiting rank leaves the core to
  // others when oversubscribed.
  const Stopwatch waited;
  for (int polls = 0;; ++polls) {
    if (test()) return;
    if (timeout_s_ > 0 && waited.seconds() > timeout_s_) {
      char msg[64];
      std::snprintf(msg, sizeof msg, "%g", timeout_s_);
      throw CommTimeout("communication timeout: " + what_ + " did not complete within comm.timeout_s = " + msg +
                        " s (a rank skipped or is stuck before this operation)");
    }
    if (polls < 1000) sched_yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool Work::test() {
  int done = 1;
  if (req_ != MPI_REQUEST_NULL) MPI_Test(&req_, &done, MPI_STATUS_IGNORE);
  if (pending_ && pending_->test()) pending_.reset();
  return done != 0 && !pending_;
}

Axis::Axis(std::string name, MPI_Comm comm, double timeout_s)
    : name_(std::move(name)), comm_(comm), timeout_s_(timeout_s) {
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

Axis::~Axis() {
  device_.reset();  // the NCCL communicator before the MPI one it was created over
  if (comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::uint64_t Axis::ring_share(std::size_t bytes) const {
  return size_ > 1 ? bytes * static_cast<std::size_t>(size_ - 1) / static_cast<std::size_t>(size_) : 0;
}

std::string Axis::describe(const char* op, const std::string& label) {
  return "axis " + name_ + ": " + op + " #" + std::to_string(++seq_) + (label.empty() ? "" : " (" + label + ")");
}

void Axis::attach(std::unique_ptr<DeviceComm> device) { device_ = std::move(device); }

const char* Axis::backend() const { return device_ ? "nccl" : "mpi"; }

template <class Mpi, class Device>
Work Axis::issue(const char* op, const std::string& label, Mpi&& mpi, Device&& device) {
  auto what = describe(op, label);
  if (device_) return Work(device(*device_), std::move(what), timeout_s_, &wait_s_);
  MPI_Request req = MPI_REQUEST_NULL;
  mpi(what, &req);
  return Work(req, std::move(what), timeout_s_, &wait_s_);
}

Work Axis::allreduce_sum(void* data, std::size_t n, Element type, const std::string& label) {
  bytes_ += ring_share(2 * n * bytes_of(type));
  return issue("allreduce", label, [&](const std::string& what, MPI_Request* req) {
    const auto [datatype, sum] = mpi_sum(type);
    MPI_Iallreduce(MPI_IN_PLACE, data, checked_count(n, what), datatype, sum, comm_, req);
  }, [&](DeviceComm& d) { return d.allreduce_sum(data, n, type); });
}

Work Axis::allreduce_max(float* data, std::size_t n, const std::string& label) {
  bytes_ += ring_share(2 * n * sizeof(float));
  return issue("allreduce-max", label, [&](const std::string& what, MPI_Request* req) {
    MPI_Iallreduce(MPI_IN_PLACE, data, checked_count(n, what), MPI_FLOAT, MPI_MAX, comm_, req);
  }, [&](DeviceComm& d) { return d.allreduce_max(data, n); });
}

Work Axis::reduce_scatter_sum(const void* in, void* out, std::size_t n, Element type, const std::string& label) {
  bytes_ += ring_share(size_ * n * bytes_of(type));
  return issue("reduce-scatter", label, [&](const std::string& what, MPI_Request* req) {
    const auto [datatype, sum] = mpi_sum(type);
    MPI_Ireduce_scatter_block(in, out, checked_count(n, what), datatype, sum, comm_, req);
  }, [&](DeviceComm& d) { return d.reduce_scatter_sum(in, out, n, type); });
}

Work Axis::all_gather(const void* in, void* out, std::size_t bytes, const std::string& label) {
  bytes_ += ring_share(size_ * bytes);
  return issue("all-gather", label, [&](const std::string& what, MPI_Request* req) {
    const int n = checked_count(bytes, what);
    const bool in_place = in == static_cast<const char*>(out) + static_cast<std::size_t>(rank_) * bytes;
    MPI_Iallgather(in_place ? MPI_IN_PLACE : in, n, MPI_BYTE, out, n, MPI_BYTE, comm_, req);
  }, [&](DeviceComm& d) { return d.all_gather(in, out, bytes); });
}

Work Axis::broadcast(void* data, std::size_t bytes, int root, const std::string& label) {
  if (rank_ == root && size_ > 1) bytes_ += bytes;
  return issue("broadcast", label, [&](const std::string& what, MPI_Request* req) {
    MPI_Ibcast(data, checked_count(bytes, what), MPI_BYTE, root, comm_, req);
  }, [&](DeviceComm& d) { return d.broadcast(data, bytes, root); });
}

Work Axis::all_to_all(const void* in, void* out, std::size_t bytes, const std::string& label) {
  bytes_ += ring_share(size_ * bytes);
  return issue("all-to-all", label, [&](const std::string& what, MPI_Request* req) {
    const int n = checked_count(bytes, what);
    MPI_Ialltoall(in, n, MPI_BYTE, out, n, MPI_BYTE, comm_, req);
  }, [&](DeviceComm& d) { return d.all_to_all(in, out, bytes); });
}

Work Axis::all_to_all_v(const void* in, const std::vector<std::int64_t>& send_rows, void* out,
                        const std::vector<std::int64_t>& recv_rows, std::size_t row_bytes, const std::string& label) {
  const auto us = static_cast<std::size_t>(size_);
  if (send_rows.size() != us || recv_rows.size() != us)
    throw std::invalid_argument("axis " + name_ + ": all_to_all_v takes " + std::to_string(us) + " counts each way, got " +
                                std::to_string(send_rows.size()) + " and " + std::to_string(recv_rows.size()));
  for (std::size_t r = 0; r < us; ++r)
    if (static_cast<int>(r) != rank_) bytes_ += static_cast<std::uint64_t>(send_rows[r]) * row_bytes;
  // Counts, then displacements, for each direction: MPI reads them until the operation completes.
  auto arrays = std::make_shared<std::vector<int>>(4 * us);
  int* send_count = arrays->data();
  int* send_at = send_count + us;
  int* recv_count = send_at + us;
  int* recv_at = recv_count + us;
  std::int64_t sent = 0, received = 0;
  const std::string what = "axis " + name_ + ": all-to-all-v (" + label + ")";
  for (std::size_t r = 0; r < us; ++r) {
    send_count[r] = checked_count(static_cast<std::size_t>(send_rows[r]), what);
    send_at[r] = checked_count(static_cast<std::size_t>(sent), what);
    recv_count[r] = checked_count(static_cast<std::size_t>(recv_rows[r]), what);
    recv_at[r] = checked_count(static_cast<std::size_t>(received), what);
    sent += send_rows[r], received += recv_rows[r];
  }
  Work w = issue("all-to-all-v", label, [&](const std::string&, MPI_Request* req) {
    MPI_Datatype row;  // freed at once: MPI keeps it for the pending operation
    MPI_Type_contiguous(checked_count(row_bytes, "axis " + name_ + ": all-to-all-v row"), MPI_BYTE, &row);
    MPI_Type_commit(&row);
    MPI_Ialltoallv(in, send_count, send_at, row, out, recv_count, recv_at, row, comm_, req);
    MPI_Type_free(&row);
  }, [&](DeviceComm& d) { return d.all_to_all_v(in, send_rows, out, recv_rows, row_bytes); });
  w.hold(std::move(arrays));
  return w;
}

Work Axis::send(const void* data, std::size_t bytes, int peer, int tag, const std::string& label) {
  bytes_ += bytes;
  return issue("send", label + (label.empty() ? "" : ", ") + "to " + std::to_string(peer),
               [&](const std::string& what, MPI_Request* req) {
                 MPI_Isend(data, checked_count(bytes, what), MPI_BYTE, peer, tag, comm_, req);
               }, [&](DeviceComm& d) { return d.send(data, bytes, peer); });
}

Work Axis::recv(void* data, std::size_t bytes, int peer, int tag, const std::string& label) {
  return issue("recv", label + (label.empty() ? "" : ", ") + "from " + std::to_string(peer),
               [&](const std::string& what, MPI_Request* req) {
                 MPI_Irecv(data, checked_count(bytes, what), MPI_BYTE, peer, tag, comm_, req);
               }, [&](DeviceComm& d) { return d.recv(data, bytes, peer); });
}

void Axis::blocking_sum(double* data, int n, const std::string& label) {
  blocking_allreduce(data, n, MPI_SUM, "allreduce", label);
}

void Axis::blocking_max(double* data, int n, const std::string& label) {
  blocking_allreduce(data, n, MPI_MAX, "allreduce-max", label);
}

void Axis::blocking_min(double* data, int n, const std::string& label) {
  blocking_allreduce(data, n, MPI_MIN, "allreduce-min", label);
}

void Axis::blocking_allreduce(double* data, int n, MPI_Op op, const char* name, const std::string& label) {
  // Non-blocking underneath so that comm.timeout_s covers the step loop's small reductions too.
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Iallreduce(MPI_IN_PLACE, data, n, MPI_DOUBLE, op, comm_, &req);
  finish_blocking(req, name, label);
}

void Axis::finish_blocking(MPI_Request req, const char* op, const std::string& label) {
  Work(req, describe(op, label), timeout_s_, &wait_s_).wait();
}

void Axis::blocking_all_to_all(const std::int64_t* in, std::int64_t* out, int n, const std::string& label) {
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Ialltoall(in, n, MPI_INT64_T, out, n, MPI_INT64_T, comm_, &req);
  finish_blocking(req, "all-to-all", label);
}

std::vector<std::string> Axis::blocking_gather_text(const std::string& mine, const std::string& label) {
  const auto us = static_cast<std::size_t>(size_);
  int length = checked_count(mine.size(), "axis " + name_ + ": " + label);
  std::vector<int> lengths(us), offsets(us);
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_, &req);
  finish_blocking(req, "all-gather", label + " lengths");
  long long total = 0;
  for (std::size_t r = 0; r < us; ++r) {
    offsets[r] = checked_count(static_cast<std::size_t>(total), "axis " + name_ + ": " + label);
    total += lengths[r];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Iallgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm_, &req);
  finish_blocking(req, "all-gather", label);
  std::vector<std::string> out;
  for (std::size_t r = 0; r < us; ++r)
    out.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
  return out;
}

std::unique_ptr<Axis> Axis::split(int color, int key, std::string name) const {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(comm_, color, key, &sub);
  if (sub == MPI_COMM_NULL) return nullptr;
  auto axis = std::make_unique<Axis>(std::move(name), sub, timeout_s_);
  if (device_) axis->attach(make_nccl_comm(sub, axis->name()));  // the same backend as this axis
  return axis;
}

}  // namespace gridtrain
