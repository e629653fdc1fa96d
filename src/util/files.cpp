#include "gridtrain/util/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <vector>

namespace gridtrain {

void replace_file(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  auto fail = [&](int code, const std::string& what) {
    ::unlink(tmp.c_str());
    throw std::system_error(code, std::generic_category(), what);
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail(errno, "cannot create " + tmp.string());
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int code = errno;
  ::close(fd);
  if (!written) fail(code == 0 ? ENOSPC : code, "cannot write " + tmp.string());  // a short write sets no errno
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(errno, "cannot rename " + tmp.string() + " to " + path.string());
  const auto parent = path.parent_path();
  const int dir = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir >= 0) ::fsync(dir), ::close(dir);
}

int probe_write(const std::filesystem::path& dir) {
  const std::string path = (dir.empty() ? std::filesystem::path(".") : dir) / ".gridtrain-probe";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return errno;
  const std::vector<char> zeros(64 * 1024, 0);  // more than a page: a full tmpfs refuses it
  errno = 0;
  const bool ok = ::write(fd, zeros.data(), zeros.size()) == static_cast<ssize_t>(zeros.size()) && ::fsync(fd) == 0;
  const int code = ok ? 0 : (errno == 0 ? ENOSPC : errno);
  ::close(fd);
  ::unlink(path.c_str());
  return code;
}

}  // namespace gridtrain
