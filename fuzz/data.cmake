# The data layer's harnesses (cohort/data): TFRecord files and their
# Examples, IDX files. For fuzz/CMakeLists.txt's add_fuzzer():
#   include(${CMAKE_CURRENT_SOURCE_DIR}/data.cmake)
# Each harness's entry is fuzz_one(data, size), called by its
# LLVMFuzzerTestOneInput (tests/data also replays and mutates the seeds
# through fuzz_one in every build: data_fuzz_*).
add_fuzzer(record_reader SOURCES record_reader.cc LIBS cohort_data)
add_fuzzer(idx_reader SOURCES idx_reader.cc LIBS cohort_data)
