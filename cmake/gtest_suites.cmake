# Registers each gtest suite of a test binary as one CTest test, run with
# --gtest_filter=<suite>.*: what cohort_add_test(... PER_SUITE) runs after
# the binary is linked, in place of gtest_discover_tests' one test per case.
# For binaries that load LibTorch, whose start-up (~1 s of CPU, its
# operator registry) is most of a typical case's time.
#
# Usage: cmake -D TEST_EXECUTABLE=<binary> -D CTEST_FILE=<file to write>
#              -D TIMEOUT=<s> -D LABELS=<a,b> -D WORKING_DIRECTORY=<dir>
#              -P gtest_suites.cmake
execute_process(COMMAND ${TEST_EXECUTABLE} --gtest_list_tests
                WORKING_DIRECTORY ${WORKING_DIRECTORY}
                OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE status TIMEOUT 60)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${status}):\n${listing}${errors}")
endif()
string(REPLACE "," ";" labels "${LABELS}")
# A suite's line starts in column 0 ("Suite." or "Prefix/Suite.", maybe
# followed by "  # TypeParam = ..."); its cases' lines are indented. Matched
# in the whole text: a case's "# GetParam() = [..." would upset a CMake list.
string(REGEX MATCHALL "(^|\n)[A-Za-z0-9_/]+\\." heads "${listing}")
set(text "")
foreach(head IN LISTS heads)
  string(REGEX REPLACE "^\n?(.*)\\.$" "\\1" suite "${head}")
  string(APPEND text
    "add_test([==[${suite}]==] [==[${TEST_EXECUTABLE}]==] [==[--gtest_filter=${suite}.*]==])\n"
    "set_tests_properties([==[${suite}]==] PROPERTIES WORKING_DIRECTORY [==[${WORKING_DIRECTORY}]==] "
    "TIMEOUT ${TIMEOUT} SKIP_REGULAR_EXPRESSION [==[\\[  SKIPPED \\]]==] LABELS \"${labels}\")\n")
endforeach()
if(NOT heads)
  message(FATAL_ERROR "${TEST_EXECUTABLE} lists no test suite:\n${listing}")
endif()
file(WRITE ${CTEST_FILE} "${text}")
