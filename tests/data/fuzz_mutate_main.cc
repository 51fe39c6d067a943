// A few seconds of fuzzing in every test run, without libFuzzer: each seed
// of a harness's corpus (fuzz/corpus/<name>), then deterministic mutations
// of it (every single-bit flip of its first 64 bytes, every truncation,
// byte insertions and duplications), through the harness's fuzz_one. A
// property failure aborts (FUZZ_CHECK), an escaped exception terminates:
// either fails the test. The real fuzzing runs under libFuzzer (fuzz/).
//
//   <binary> CORPUS_DIR
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

int fuzz_one(const uint8_t* data, size_t size);

namespace {

size_t run(const std::vector<uint8_t>& input) {
  fuzz_one(input.data(), input.size());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc != 2 || !fs::is_directory(argv[1])) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> seeds;
  for (const auto& e : fs::directory_iterator(argv[1]))
    if (e.is_regular_file()) seeds.push_back(e.path());
  std::sort(seeds.begin(), seeds.end());
  if (seeds.empty()) {
    std::fprintf(stderr, "no seeds in %s\n", argv[1]);
    return 2;
  }
  size_t executions = 0;
  for (const fs::path& path : seeds) {
    std::ifstream f(path, std::ios::binary);
    const std::vector<uint8_t> seed((std::istreambuf_iterator<char>(f)), {});
    executions += run(seed);
    for (size_t byte = 0; byte < std::min<size_t>(seed.size(), 64); ++byte)
      for (int bit = 0; bit < 8; ++bit) {
        auto m = seed;
        m[byte] ^= uint8_t(1 << bit);
        executions += run(m);
      }
    for (size_t n = 0; n < seed.size(); ++n) executions += run({seed.begin(), seed.begin() + long(n)});
    for (size_t at = 0; at <= seed.size(); at += std::max<size_t>(1, seed.size() / 16)) {
      for (uint8_t value : {uint8_t(0x00), uint8_t(0xff), uint8_t(0x80)}) {
        auto m = seed;
        m.insert(m.begin() + long(at), value);
        executions += run(m);
      }
      auto twice = seed;
      twice.insert(twice.begin() + long(at), seed.begin(), seed.begin() + long(std::min(at, seed.size())));
      executions += run(twice);
    }
  }
  std::printf("%zu seeds, %zu executions, no property failed\n", seeds.size(), executions);
  return 0;
}
