// Calibration: fitting a topology's link parameters to measured collective
// times (cohort-bench's CSV output), so that collectives.h reproduces them.
//
// For a fixed algorithm and topology, an allreduce's modelled time is affine
// in the fitted link's alpha and 1/bandwidth:
//   t(n) = c(n) + alpha * a(n) + (1/bandwidth) * b(n)
// with a, b, c read off the model itself (collectives.h at unit and zero
// values). fit_link() finds alpha >= 0 and bandwidth > 0 minimising the
// squared relative error over the samples (every size counts alike, small
// or large), and reports how well the fit holds.
#pragma once

#include <string>
#include <vector>

#include "tools/sim/collectives.h"
#include "tools/sim/topology.h"

namespace cohort::sim {

enum class LinkClass { shm, intra, network };
LinkClass parse_link_class(const std::string& name);  // ConfigError on others

struct Sample {
  double bytes = 0;
  double seconds = 0;
};

struct LinkFit {
  Link link;
  double rms_relative_error = 0;
  double max_relative_error = 0;
  size_t points = 0;
};

// Fits `which` link of `t` (its other parameters as given) to samples of
// collective `c` (sizes as cohort-bench gives them: an allgather's is its
// whole output). ConfigError with fewer than two samples, or when the
// samples do not depend on that link (e.g. the network with one host).
LinkFit fit_link(const Topology& t, Algorithm a, LinkClass which, const std::vector<Sample>& samples,
                 Collective c = Collective::allreduce);

// Fits the network link's CPU costs (Link::cpu_step_s, cpu_s_per_byte) of
// `t` to samples of an allreduce's CPU time per rank (Sample::seconds: CPU
// seconds a rank spent per op, as the machine's busy time measured them),
// the same way: least squared relative error, both costs >= 0. Returns the
// network link with them set.
LinkFit fit_network_cpu(const Topology& t, Algorithm a, const std::vector<Sample>& samples);

// cohort-bench --csv rows of `collective` (the header names the columns);
// `ranks` gets the ranks column (every row must agree). Rows with size 0
// are skipped, and so is cohortrun's "[rank] " tag. ConfigError naming the file and line on malformed input.
std::vector<Sample> read_bench_csv(const std::string& path, const std::string& collective, int& ranks);

}  // namespace cohort::sim
