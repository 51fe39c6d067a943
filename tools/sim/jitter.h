// Jitter: a synchronous step waits for its slowest rank.
//
// A rank's compute varies from step to step (the OS, other programs, the
// caches), and a step whose gradients are averaged ends only when the last
// rank's backward has. Given the step periods that one rank measured (a
// workload's step_periods_s) as the distribution of one rank's step, the
// median step of R ranks that vary independently is the median of the
// largest of R draws: the distribution's 0.5^(1/R) quantile. So R ranks
// compute slowest_of(periods, R) times as long as the median rank alone
// (a timeline's workload holds the median step).
//
// The empirical quantile (linear between order statistics, numpy's
// default) never exceeds the largest period measured: for R well beyond
// the number of periods the factor approaches largest / median and stops
// there, an underestimate for very many ranks. Ranks that slow down
// together (one machine's shared load) wait for each other less than this.
#pragma once

#include <vector>

namespace cohort::sim {

// The factor (>= 1) by which `ranks` ranks' median step exceeds one rank's;
// 1 for one rank or fewer than two periods.
double slowest_of(std::vector<double> periods, int ranks);

}  // namespace cohort::sim
