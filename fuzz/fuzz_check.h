// FUZZ_CHECK: a property a harness asserts about the code under test. A
// failure prints the condition and aborts, which libFuzzer reports as a crash
// (with the input saved) and the replay runner as a failed test.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition)                                                                  \
  do {                                                                                         \
    if (!(condition)) {                                                                        \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)
