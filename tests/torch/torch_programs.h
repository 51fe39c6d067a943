// The programs that tests/torch's process tests start under cohortrun, built
// as one binary (torch_programs.cc): each program's main() is the run() of
// its namespace.
#pragma once

namespace cohort::testing {
namespace elastic_program {
int run(int argc, char** argv);
}
namespace fit_resume_program {
int run(int argc, char** argv);
}
namespace ps_strategy_program {
int run(int argc, char** argv);
}
namespace straggler_program {
int run(int argc, char** argv);
}
}  // namespace cohort::testing
