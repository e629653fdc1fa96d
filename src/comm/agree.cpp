#include "gridtrain/comm/agree.hpp"

#include <cstring>
#include <system_error>
#include <vector>

#include "gridtrain/comm/axis.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {

std::optional<Failure> agree_on(MPI_Comm comm, const std::function<void()>& fn, double timeout_s,
                                const std::string& phase) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::string message;
  int mine[3] = {0, 0, 0};  // failed, OS error code, message length
  try {
    fn();
  } catch (const std::system_error& e) {
    message = e.what();
    mine[0] = 1, mine[1] = e.code().value();
  } catch (const std::exception& e) {
    message = e.what();
    mine[0] = 1;
  }
  mine[2] = static_cast<int>(message.size());
  const std::string what = "agreement after " + (phase.empty() ? std::string("a phase") : phase);
  std::vector<int> all(3 * static_cast<std::size_t>(size));
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Iallgather(mine, 3, MPI_INT, all.data(), 3, MPI_INT, comm, &req);
  try {
    Work(req, what, timeout_s).wait();
  } catch (const CommTimeout& e) {  // the peers never came: say what went wrong here, if anything
    throw CommTimeout(std::string(e.what()) + (mine[0] ? "; on this rank the phase had failed: " + message : ""));
  }

  Failure f;
  int os_code = 0, os_rank = -1;
  for (int r = 0; r < size; ++r) {
    const int* a = &all[3 * static_cast<std::size_t>(r)];
    if (!a[0]) continue;
    if (f.rank < 0) f.rank = r;
    ++f.failed_ranks;
    if (os_code == 0 && a[1] != 0) os_code = a[1], os_rank = r;
  }
  if (f.rank < 0) return std::nullopt;
  // Ship the first failing rank's message to everyone.
  f.message.resize(static_cast<std::size_t>(all[3 * static_cast<std::size_t>(f.rank) + 2]));
  if (rank == f.rank) f.message = message;
  MPI_Ibcast(f.message.data(), static_cast<int>(f.message.size()), MPI_CHAR, f.rank, comm, &req);
  Work(req, what, timeout_s).wait();
  // In a collective write the OS error may reach only the rank that did the system call.
  const std::string os_text = std::strerror(os_code);
  if (os_code != 0 && f.message.find(os_text) == std::string::npos)
    f.message += " (rank " + std::to_string(os_rank) + ": " + os_text + ")";
  return f;
}

void agree(MPI_Comm comm, const std::function<void()>& fn) {
  if (auto f = agree_on(comm, fn)) throw Error(f->message);
}

std::string broadcast_text(std::string text, MPI_Comm comm, int root) {
  int n = static_cast<int>(text.size());
  MPI_Bcast(&n, 1, MPI_INT, root, comm);
  text.resize(static_cast<std::size_t>(n));
  MPI_Bcast(text.data(), n, MPI_CHAR, root, comm);
  return text;
}

}  // namespace gridtrain
