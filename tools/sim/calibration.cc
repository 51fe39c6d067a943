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

// One measurement as the model sees it: t = c + p * a + q * b, with a, b, c
// read off the model and (p, q) the two parameters fitted.
struct Row {
  double a, b, c, t;
};

struct AffineFit {
  double p = 0, q = 0;
  double rms_relative_error = 0, max_relative_error = 0;
};

// p >= 0 and q >= 0 minimising the squared relative error over `rows`
// (every size counts alike); `what` names the two for errors.
AffineFit fit_affine(const std::vector<Row>& rows, const char* what) {
  auto solve = [&](bool use_p, bool use_q, double& p, double& q) {
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
    p = q = 0;
    if (use_p && use_q) {
      const double det = saa * sbb - sab * sab;
      if (std::fabs(det) > 0) {
        p = (say * sbb - sby * sab) / det;
        q = (sby * saa - say * sab) / det;
      }
    } else if (use_p && saa > 0) {
      p = say / saa;
    } else if (use_q && sbb > 0) {
      q = sby / sbb;
    }
  };
  bool any_a = false, any_b = false;
  for (const Row& r : rows) {
    any_a = any_a || r.a > 0;
    any_b = any_b || r.b > 0;
  }
  COHORT_CHECK_AS(ConfigError, any_b)
      << "the samples do not depend on that link's " << what << " under this algorithm and topology "
         "(e.g. the network link with one host)";
  AffineFit fit;
  solve(any_a, true, fit.p, fit.q);
  // Physical values only: refit the other parameter with one clamped at 0.
  if (fit.p < 0) solve(false, true, fit.p, fit.q);
  if (fit.q <= 0) {
    solve(any_a, false, fit.p, fit.q);
    fit.q = 0;
  }
  fit.p = std::max(0.0, fit.p);
  double ss = 0;
  for (const Row& r : rows) {
    const double rel = (r.c + fit.p * r.a + fit.q * r.b - r.t) / r.t;
    ss += rel * rel;
    fit.max_relative_error = std::max(fit.max_relative_error, std::fabs(rel));
  }
  fit.rms_relative_error = std::sqrt(ss / double(rows.size()));
  return fit;
}

// A network allreduce's CPU per rank with the network's CPU costs set.
double model_cpu(Topology t, Algorithm a, double step_s, double s_per_byte, double n) {
  t.network.cpu_step_s = step_s;
  t.network.cpu_s_per_byte = s_per_byte;
  return allreduce_cost(t, a, n).cpu_s;
}

// Fits (p, q) of `model(p, q, bytes)`, affine in both, to `samples`; the
// regressors are read off the model at (unit_p, 0) and (0, unit_q), scaled
// (units small enough that the model stays affine there). `values` names
// what the samples measure and `q_name` q, for errors. Returns the fit, and
// a LinkFit with its errors whose link is the caller's to fill.
template <typename Model>
std::pair<AffineFit, LinkFit> fit_model(const std::vector<Sample>& samples, Model model, double unit_p, double unit_q,
                                        const char* values, const char* q_name) {
  COHORT_CHECK_AS(ConfigError, samples.size() >= 2) << "calibration needs at least two sizes, got " << samples.size();
  std::vector<Row> rows;
  for (const Sample& s : samples) {
    COHORT_CHECK_AS(ConfigError, s.seconds > 0 && s.bytes > 0)
        << "calibration samples need positive sizes and " << values;
    const double c = model(0, 0, s.bytes);
    rows.push_back({(model(unit_p, 0, s.bytes) - c) / unit_p, (model(0, unit_q, s.bytes) - c) / unit_q, c, s.seconds});
  }
  const AffineFit f = fit_affine(rows, q_name);
  LinkFit fit;
  fit.points = rows.size();
  fit.rms_relative_error = f.rms_relative_error;
  fit.max_relative_error = f.max_relative_error;
  return {f, fit};
}

}  // namespace

LinkFit fit_link(const Topology& t, Algorithm a, LinkClass which, const std::vector<Sample>& samples, Collective k) {
  auto [f, fit] = fit_model(
      samples, [&](double alpha, double inv_bw, double n) { return model_time(t, a, which, k, alpha, inv_bw, n); }, 1,
      1, "times", "bandwidth");
  COHORT_CHECK_AS(ConfigError, f.q > 0) << "the samples leave no time for the bandwidth term (times do not grow with size)";
  fit.link.alpha_s = f.p;
  fit.link.bytes_per_s = 1 / f.q;
  return fit;
}

LinkFit fit_network_cpu(const Topology& t, Algorithm a, const std::vector<Sample>& samples) {
  // The model's CPU is affine in the two costs while below the op's time
  // (add_cpu's cap): regressors at tiny unit costs.
  auto [f, fit] = fit_model(
      samples, [&](double step_s, double s_per_byte, double n) { return model_cpu(t, a, step_s, s_per_byte, n); },
      1e-12, 1e-21, "CPU times", "CPU per byte");
  fit.link = t.network;
  fit.link.cpu_step_s = f.p;
  fit.link.cpu_s_per_byte = f.q;
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
