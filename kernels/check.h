// The one error type and the one status-check helper for the whole project (docs/design.md §6).
//
// Every failure becomes a taco::Error carrying a one-line message and a process exit code:
//   2  input the user can fix (config, data, layout, a corrupted buffer): the message says what
//      was wrong and what to do;
//   1  a failure of the system underneath (CUDA, NCCL, MPI, cuBLAS, I/O).
// The entry points catch it, print the line once and make every rank exit non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace taco {

class Error : public std::runtime_error {
 public:
  Error(std::string message, int exit_code) : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Bad input: exit code 2.
class UserError : public Error {
 public:
  explicit UserError(std::string message) : Error(std::move(message), 2) {}
};

// The rank that messages name; set once after MPI init (-1 before).
void set_error_rank(int rank);
int error_rank();

// Throws Error(exit code 1): "rank R: LIBRARY CALL failed (code): detail [file:line]".
[[noreturn]] void fail_status(const char* library, const char* call, long code,
                              const std::string& detail, const char* file, int line);

}  // namespace taco

// Internal invariant (a bug in taco, never an input check): throws Error with exit code 1.
#define TACO_CHECK(cond, detail)                                                      \
  do {                                                                                \
    if (!(cond)) ::taco::fail_status("taco", #cond, 0, (detail), __FILE__, __LINE__); \
  } while (0)
