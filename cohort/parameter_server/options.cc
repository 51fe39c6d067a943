#include "cohort/parameter_server/options.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <sstream>

#include "cohort/common/check.h"

namespace cohort::ps {

const char* update_rule_name(UpdateRule rule) {
  switch (rule) {
    case UpdateRule::sgd: return "sgd";
    case UpdateRule::adam: return "adam";
    case UpdateRule::adagrad: return "adagrad";
    case UpdateRule::sum: return "sum";
  }
  return "?";
}

UpdateRule parse_update_rule(const std::string& name) {
  for (UpdateRule r : {UpdateRule::sgd, UpdateRule::adam, UpdateRule::adagrad, UpdateRule::sum})
    if (name == update_rule_name(r)) return r;
  COHORT_THROW(ConfigError) << "parameter_server: optimizer='" << name << "' is not one of sgd, adam, adagrad, sum";
}

const char* job_option_keys() {
  return "servers, staleness (K or async), backup_workers, optimizer (sgd|adam|adagrad|sum), lr, momentum, "
         "weight_decay, beta1, beta2, eps, initial_accumulator, shards, min_shard_bytes, max_shards, replicas, "
         "replicate_every, checkpoint_dir, hybrid, sparse_min_rows";
}

namespace {

int64_t to_int(const std::string& key, const std::string& text) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  COHORT_CHECK_AS(ConfigError, ec == std::errc() && end == text.data() + text.size() && !text.empty())
      << "parameter_server: " << key << "='" << text << "' is not an integer";
  return v;
}

double to_double(const std::string& key, const std::string& text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  COHORT_CHECK_AS(ConfigError, ec == std::errc() && end == text.data() + text.size() && !text.empty() &&
                                   std::isfinite(v))
      << "parameter_server: " << key << "='" << text << "' is not a number";
  return v;
}

bool to_bool(const std::string& key, const std::string& text) {
  if (text == "1" || text == "true" || text == "on" || text == "yes") return true;
  if (text == "0" || text == "false" || text == "off" || text == "no") return false;
  COHORT_THROW(ConfigError) << "parameter_server: " << key << "='" << text << "' is not a boolean (0 or 1)";
}

}  // namespace

JobOptions parse_job_options(const std::map<std::string, std::string>& keys, int world_size) {
  JobOptions o;
  OptimizerOptions& opt = o.optimizer;
  const std::map<std::string, std::function<void(const std::string&, const std::string&)>> setters = {
      {"servers", [&](auto& k, auto& v) { o.servers = static_cast<int>(to_int(k, v)); }},
      {"staleness",
       [&](auto& k, auto& v) {
         o.staleness = v == "async" ? kAsync : to_int(k, v);
         COHORT_CHECK_AS(ConfigError, o.staleness >= 0 || v == "async")
             << "parameter_server: staleness='" << v << "' must be 0 (synchronous), K > 0 or async";
       }},
      {"backup_workers", [&](auto& k, auto& v) { o.backup_workers = static_cast<int>(to_int(k, v)); }},
      {"optimizer", [&](auto&, auto& v) { opt.rule = parse_update_rule(v); }},
      {"lr", [&](auto& k, auto& v) { opt.lr = to_double(k, v); }},
      {"momentum", [&](auto& k, auto& v) { opt.momentum = to_double(k, v); }},
      {"weight_decay", [&](auto& k, auto& v) { opt.weight_decay = to_double(k, v); }},
      {"beta1", [&](auto& k, auto& v) { opt.beta1 = to_double(k, v); }},
      {"beta2", [&](auto& k, auto& v) { opt.beta2 = to_double(k, v); }},
      {"eps", [&](auto& k, auto& v) { opt.eps = opt.adagrad_eps = to_double(k, v); }},
      {"initial_accumulator", [&](auto& k, auto& v) { opt.initial_accumulator = to_double(k, v); }},
      {"shards", [&](auto& k, auto& v) { o.partition.num_shards = static_cast<int>(to_int(k, v)); }},
      {"min_shard_bytes", [&](auto& k, auto& v) { o.partition.min_shard_bytes = to_int(k, v); }},
      {"max_shards", [&](auto& k, auto& v) { o.partition.max_shards = static_cast<int>(to_int(k, v)); }},
      {"replicas", [&](auto& k, auto& v) { o.replicas = static_cast<int>(to_int(k, v)); }},
      {"replicate_every", [&](auto& k, auto& v) { o.replicate_every = to_int(k, v); }},
      {"checkpoint_dir", [&](auto&, auto& v) { o.checkpoint_dir = v; }},
      {"hybrid", [&](auto& k, auto& v) { o.hybrid = to_bool(k, v); }},
      {"sparse_min_rows", [&](auto& k, auto& v) { o.sparse_min_rows = to_int(k, v); }},
  };
  for (const auto& [key, value] : keys) {
    const auto it = setters.find(key);
    COHORT_CHECK_AS(ConfigError, it != setters.end())
        << "parameter_server: unknown key '" << key << "' (known: " << job_option_keys() << ")";
    it->second(key, value);
  }
  COHORT_CHECK_AS(ConfigError, o.servers >= 1 && o.servers < world_size)
      << "parameter_server: servers=" << o.servers << " needs 1 <= servers < ranks (" << world_size
      << " ranks): at least one rank must be a worker";
  const int workers = world_size - o.servers;
  COHORT_CHECK_AS(ConfigError, o.backup_workers >= 0 && o.backup_workers < workers)
      << "parameter_server: backup_workers=" << o.backup_workers << " needs 0 <= backup_workers < workers ("
      << workers << ")";
  COHORT_CHECK_AS(ConfigError, o.backup_workers == 0 || o.staleness == 0)
      << "parameter_server: backup_workers applies to synchronous training only (staleness=0)";
  // The summation service keeps only the last applied step's sum, and each
  // worker steps a replica of its own with every step's sum: a worker that
  // lags behind the applied steps would read a later step's sum instead of
  // its own, and its replica would drift from the others'.
  COHORT_CHECK_AS(ConfigError, o.optimizer.rule != UpdateRule::sum || (o.staleness == 0 && o.backup_workers == 0))
      << "parameter_server: optimizer=sum (the strategy's optimizer=program) needs staleness=0 and "
         "backup_workers=0: every worker steps its own replica with every step's sum, which a lagging worker "
         "would miss; use a server-side optimizer (sgd|adam|adagrad) with staleness or backup workers";
  COHORT_CHECK_AS(ConfigError, o.replicas == 0 || o.replicas == 1)
      << "parameter_server: replicas=" << o.replicas << " must be 0 or 1";
  COHORT_CHECK_AS(ConfigError, o.replicas == 0 || o.servers >= 2)
      << "parameter_server: replicas=1 needs at least 2 servers (servers=" << o.servers << ")";
  COHORT_CHECK_AS(ConfigError, o.replicate_every >= 1)
      << "parameter_server: replicate_every=" << o.replicate_every << " must be at least 1";
  COHORT_CHECK_AS(ConfigError, o.partition.num_shards >= 0 && o.partition.max_shards >= 0 &&
                                   o.partition.min_shard_bytes >= 1)
      << "parameter_server: shards, max_shards must be >= 0 and min_shard_bytes >= 1";
  COHORT_CHECK_AS(ConfigError, opt.lr >= 0 && opt.momentum >= 0 && opt.weight_decay >= 0 && opt.beta1 >= 0 &&
                                   opt.beta1 < 1 && opt.beta2 >= 0 && opt.beta2 < 1 && opt.eps > 0)
      << "parameter_server: lr, momentum, weight_decay >= 0, 0 <= beta1, beta2 < 1 and eps > 0 are required";
  return o;
}

std::string describe(const JobOptions& o) {
  std::ostringstream s;
  s << "servers=" << o.servers << ",staleness=";
  if (o.staleness == kAsync)
    s << "async";
  else
    s << o.staleness;
  s << ",backup_workers=" << o.backup_workers << ",optimizer=" << update_rule_name(o.optimizer.rule)
    << ",lr=" << o.optimizer.lr;
  if (o.optimizer.momentum != 0) s << ",momentum=" << o.optimizer.momentum;
  if (o.partition.num_shards)
    s << ",shards=" << o.partition.num_shards;
  else
    s << ",min_shard_bytes=" << o.partition.min_shard_bytes;
  s << ",replicas=" << o.replicas;
  if (o.replicas) s << ",replicate_every=" << o.replicate_every;
  if (!o.checkpoint_dir.empty()) s << ",checkpoint_dir=" << o.checkpoint_dir;
  if (o.hybrid) s << ",hybrid=1";
  return s.str();
}

}  // namespace cohort::ps
