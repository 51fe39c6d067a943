// Command-line flags of the recommender example.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::examples::recommender {

struct RecommenderOptions {
  // "parameter_server:servers=S,..." (cohort/parameter_server/options.h
  // keys), or "allreduce": every worker holds the whole table and averages
  // its dense gradient by allreduce (the comparison of bench/ps_recommender.sh).
  std::string strategy = "parameter_server:servers=1,optimizer=adagrad,lr=0.05";
  int64_t rows = 10'000'000;  // table rows: users and items, half each
  int64_t dim = 64;
  int64_t hidden = 64;
  int64_t batch = 1024;       // examples per worker per step
  int64_t steps = 300;
  double zipf = 1.05;
  uint64_t seed = 42;
  int64_t eval_every = 100;   // steps between held-out loss/AUC lines (chief)
  int64_t eval_batches = 8;
  int64_t log_every = 20;
  double slow = 1.0;          // this many times slower on worker 1 (a straggler), by sleeping
  int threads = 0;
  std::string metrics;        // a JSON line per eval here (chief)
  bool help = false;
};

std::string usage();
RecommenderOptions parse_options(const std::vector<std::string>& args);

}  // namespace cohort::examples::recommender
