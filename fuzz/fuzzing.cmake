# COHORT_FUZZ=ON: a build for the libFuzzer harnesses of fuzz/ (clang only).
# Every target is compiled with libFuzzer's coverage instrumentation,
# AddressSanitizer and UndefinedBehaviorSanitizer (an undefined-behaviour
# finding aborts, so the fuzzer reports it as a crash); `make fuzz` builds it
# in its own directory (build-fuzz).
option(COHORT_FUZZ "Build the libFuzzer harnesses in fuzz/ (clang; instruments the whole build)" OFF)
if(COHORT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "COHORT_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ "
                        "-DCMAKE_C_COMPILER=clang, or run `make fuzz`")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
  enable_testing()
endif()
