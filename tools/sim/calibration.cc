#include "tools/sim/calibration.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "cohort/common/check.h"

namespace cohort::sim {

LinkClass parse_link_class(const std::string& name) {
  if (name == "shm") return LinkClass::shm;
  if (name == "intra") return LinkClass::intra;
  if (name == "network") return LinkClass::network;
  COHORT_THROW(ConfigError) << "unknown link class '" << name << "' (shm, intra, network)";
}

namespace {

Link& link_of(Topology& t, LinkClass c) {
  switch (c) {
    case LinkClass::shm: return t.shm;
    case LinkClass::intra: return t.intra;
    case LinkClass::network: return t.network;
  }
  return t.shm;
}

double model_time(Topology t, Algorithm a, LinkClass which, Collective c, double alpha, double inv_bw, double n) {
  t.shm_by_ranks.clear();  // the fit is of the base link at this topology's ranks per host
  Link& l = link_of(t, which);
  l.alpha_s = alpha;
  l.bytes_per_s = inv_bw > 0 ? 1 / inv_bw : kInfinity;
  switch (c) {
    case Collective::reduce_scatter: return reduce_scatter_cost(t, a, n).seconds;
    case Collective::allgather: return allgather_cost(t, a, n / t.ranks()).seconds;
    case Collective::allreduce: break;
  }
  return allreduce_cost(t, a, n).seconds;
}

}  // namespace

LinkFit fit_link(const Topology& t, Algorithm a, LinkClass which, const std::vector<Sample>& samples, Collective k) {
  COHORT_CHECK_AS(ConfigError, samples.size() >= 2) << "calibration needs at least two sizes, got " << samples.size();
  // Regressors from the model itself.
  struct Row {
    double a, b, c, t;
  };
  std::vector<Row> rows;
  for (const Sample& s : samples) {
    COHORT_CHECK_AS(ConfigError, s.seconds > 0 && s.bytes > 0) << "calibration samples need positive sizes and times";
    const double c = model_time(t, a, which, k, 0, 0, s.bytes);
    rows.push_back({model_time(t, a, which, k, 1, 0, s.bytes) - c, model_time(t, a, which, k, 0, 1, s.bytes) - c, c,
                    s.seconds});
  }
  // Weighted least squares on (t - c) / t = alpha * a / t + x * b / t.
  auto solve = [&](bool use_alpha, bool use_x, double& alpha, double& x) {
    double saa = 0, sab = 0, sbb = 0, say = 0, sby = 0;
    for (const Row& r : rows) {
      const double w = 1 / (r.t * r.t);
      const double y = r.t - r.c;
      saa += w * r.a * r.a;
      sab += w * r.a * r.b;
      sbb += w * r.b * r.b;
      say += w * r.a * y;
      sby += w * r.b * y;
    }
    alpha = x = 0;
    if (use_alpha && use_x) {
      const double det = saa * sbb - sab * sab;
      if (std::fabs(det) > 0) {
        alpha = (say * sbb - sby * sab) / det;
        x = (sby * saa - say * sab) / det;
      }
    } else if (use_alpha && saa > 0) {
      alpha = say / saa;
    } else if (use_x && sbb > 0) {
      x = sby / sbb;
    }
  };
  bool any_a = false, any_b = false;
  for (const Row& r : rows) {
    any_a = any_a || r.a > 0;
    any_b = any_b || r.b > 0;
  }
  COHORT_CHECK_AS(ConfigError, any_b)
      << "the samples do not depend on that link's bandwidth under this algorithm and topology "
         "(e.g. the network link with one host)";
  double alpha = 0, x = 0;
  solve(any_a, true, alpha, x);
  // Physical values only: refit the other parameter with one clamped at 0.
  if (alpha < 0) solve(false, true, alpha, x);
  if (x <= 0) {
    solve(any_a, false, alpha, x);
    x = 0;
  }
  COHORT_CHECK_AS(ConfigError, x > 0) << "the samples leave no time for the bandwidth term (times do not grow with size)";
  LinkFit fit;
  fit.link.alpha_s = std::max(0.0, alpha);
  fit.link.bytes_per_s = 1 / x;
  fit.points = rows.size();
  double ss = 0;
  for (const Row& r : rows) {
    const double rel = (r.c + fit.link.alpha_s * r.a + x * r.b - r.t) / r.t;
    ss += rel * rel;
    fit.max_relative_error = std::max(fit.max_relative_error, std::fabs(rel));
  }
  fit.rms_relative_error = std::sqrt(ss / double(rows.size()));
  return fit;
}

std::vector<Sample> read_bench_csv(const std::string& path, const std::string& collective, int& ranks) {
  std::ifstream in(path);
  COHORT_CHECK_AS(ConfigError, in.good()) << "cannot open '" << path << "'";
  std::string line;
  std::vector<std::string> header;
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string cell;
    while (std::getline(ss, cell, ',')) out.push_back(cell);
    if (!s.empty() && s.back() == ',') out.emplace_back();
    return out;
  };
  auto column = [&](const char* name) -> size_t {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    COHORT_THROW(ConfigError) << path << ": the CSV header has no column '" << name << "' (cohort-bench --csv output?)";
  };
  size_t c_coll = 0, c_ranks = 0, c_size = 0, c_time = 0;
  std::vector<Sample> out;
  ranks = 0;
  for (size_t lineno = 1; std::getline(in, line); ++lineno) {
    // cohortrun tags each line with its rank: "[0] ".
    if (line.size() > 2 && line[0] == '[')
      if (const size_t close = line.find("] "); close != std::string::npos) line = line.substr(close + 2);
    if (line.empty() || line[0] == '#') continue;
    const auto cells = split(line);
    if (header.empty()) {
      header = cells;
      c_coll = column("collective");
      c_ranks = column("ranks");
      c_size = column("size_bytes");
      c_time = column("time_us");
      continue;
    }
    if (cells == header) continue;  // several runs' output concatenated
    COHORT_CHECK_AS(ConfigError, cells.size() == header.size())
        << path << ":" << lineno << ": " << cells.size() << " cells, the header has " << header.size();
    if (cells[c_coll] != collective) continue;
    try {
      const int r = std::stoi(cells[c_ranks]);
      const double bytes = std::stod(cells[c_size]);
      const double us = std::stod(cells[c_time]);
      COHORT_CHECK_AS(ConfigError, ranks == 0 || ranks == r)
          << path << ":" << lineno << ": rows of " << ranks << " and " << r << " ranks in one file";
      ranks = r;
      if (bytes > 0) out.push_back({bytes, us * 1e-6});
    } catch (const std::logic_error&) {
      COHORT_THROW(ConfigError) << path << ":" << lineno << ": not a number in '" << line << "'";
    }
  }
  COHORT_CHECK_AS(ConfigError, !out.empty()) << path << ": no " << collective << " rows";
  return out;
}

}  // namespace cohort::sim
