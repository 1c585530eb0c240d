// The outermost frame of every command-line tool (taco-prep, taco-generate, taco-reshard,
// taco-export): the tool's work runs inside it, and whatever it throws becomes one line
// "NAME: error: WHAT" on stderr and the exit code: taco::Error's own (UserError: 2, bad input),
// 1 for anything else.
#pragma once

#include <cstdio>
#include <exception>

#include "kernels/check.h"

namespace taco {

template <class Work>
int run_tool(const char* name, Work&& work) {
  try {
    return work();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace taco
