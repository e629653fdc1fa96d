#include "gridtrain/util/coprocess.hpp"

#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gridtrain/util/error.hpp"

extern char** environ;

namespace gridtrain {

Coprocess::Coprocess(std::vector<std::string> argv, std::string what) : what_(std::move(what)) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    throw Error("cannot start " + what_ + ": socketpair: " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pair[1], STDIN_FILENO);  // dup2 clears FD_CLOEXEC
  posix_spawn_file_actions_adddup2(&actions, pair[1], STDOUT_FILENO);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const int rc = ::posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pair[1]);
  if (rc != 0) {
    ::close(pair[0]);
    throw Error("cannot start " + what_ + ": " + argv[0] + ": " + std::strerror(rc));
  }
  fd_ = pair[0];
}

Coprocess::~Coprocess() {
  ::close(fd_);
  int status = 0;
  while (pid_ > 0 && ::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void Coprocess::send(const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t sent = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) gone("sending to it");
    p += sent;
    n -= static_cast<std::size_t>(sent);
  }
}

void Coprocess::receive(void* data, std::size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = ::recv(fd_, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) gone("waiting for its answer");
    p += got;
    n -= static_cast<std::size_t>(got);
  }
}

void Coprocess::gone(const std::string& doing) {
  ::shutdown(fd_, SHUT_RDWR);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string how = WIFEXITED(status)     ? "exited with status " + std::to_string(WEXITSTATUS(status))
                          : WIFSIGNALED(status) ? std::string("was killed by signal ") + strsignal(WTERMSIG(status))
                                                : "ended";
  pid_ = -1;
  throw Error(what_ + " " + how + " while gridtrain was " + doing + " (its own message, if any, is above)");
}

}  // namespace gridtrain
