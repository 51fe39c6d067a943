// One binary for the four programs that tests/torch's process tests start
// under cohortrun (elastic, fit_resume, ps_strategy, straggler), run by the
// name it is started as, as busybox does: CMake links elastic_program,
// fit_resume_program, ps_strategy_program and straggler_program to it, so
// the tests and cohortrun start those names as before. Four programs in one
// unity batch compile LibTorch's templates once instead of four times.
#include "tests/torch/torch_programs.h"

#include <cstdio>
#include <string>
#include <string_view>

int main(int argc, char** argv) {
  namespace programs = cohort::testing;
  struct Program {
    std::string_view name;
    int (*run)(int, char**);
  };
  constexpr Program kPrograms[] = {{"elastic_program", programs::elastic_program::run},
                                   {"fit_resume_program", programs::fit_resume_program::run},
                                   {"ps_strategy_program", programs::ps_strategy_program::run},
                                   {"straggler_program", programs::straggler_program::run}};
  std::string_view started_as = argc > 0 ? argv[0] : "";
  started_as.remove_prefix(started_as.rfind('/') + 1);  // npos + 1 == 0: no directory
  for (const Program& program : kPrograms) {
    if (started_as == program.name) return program.run(argc, argv);
  }
  std::string names;
  for (const Program& program : kPrograms) names += " " + std::string(program.name);
  std::fprintf(stderr, "torch_programs: started as '%s'; start it as one of its links:%s\n",
               std::string(started_as).c_str(), names.c_str());
  return 2;
}
