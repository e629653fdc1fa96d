// A helper program run beside gridtrain and spoken to over one socket: its stdin and stdout are
// the two directions of an AF_UNIX stream pair, its stderr is gridtrain's. What a library that C++
// cannot link runs in (data/hf_tokenizer.cpp: Hugging Face's tokenizers, a Rust library behind a
// Python module). posix_spawn, not fork: an MPI rank's address space is not copied.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace gridtrain {

class Coprocess {
 public:
  /// Starts argv[0] (a path) with argv. `what` names the program in messages. Throws
  /// gridtrain::Error when it cannot be started (naming the program, argv[0] and the OS error).
  Coprocess(std::vector<std::string> argv, std::string what);
  /// Closes the socket (the program sees end of input) and waits for the program to exit.
  ~Coprocess();
  Coprocess(const Coprocess&) = delete;
  Coprocess& operator=(const Coprocess&) = delete;

  /// Sends all n bytes. Throws gridtrain::Error when the program has gone (no SIGPIPE).
  void send(const void* data, std::size_t n);
  /// Receives exactly n bytes. Throws gridtrain::Error, with the program's exit status, when it
  /// ends first (its own message is on stderr).
  void receive(void* data, std::size_t n);

 private:
  [[noreturn]] void gone(const std::string& doing);
  int fd_ = -1;
  pid_t pid_ = -1;
  std::string what_;
};

}  // namespace gridtrain
