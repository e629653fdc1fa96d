#include "gridtrain/util/error.hpp"

#include <vector>

namespace gridtrain {

void agree(MPI_Comm comm, const std::function<void()>& fn) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::string message;
  bool failed = false;
  try {
    fn();
  } catch (const std::exception& e) {
    failed = true;
    message = e.what();
  }
  int first = failed ? rank : size;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return;
  // Ship the first failing rank's message to everyone.
  int length = static_cast<int>(message.size());
  MPI_Bcast(&length, 1, MPI_INT, first, comm);
  std::vector<char> buffer(message.begin(), message.end());
  buffer.resize(static_cast<size_t>(length));
  MPI_Bcast(buffer.data(), length, MPI_CHAR, first, comm);
  throw Error(std::string(buffer.begin(), buffer.end()));
}

}  // namespace gridtrain
