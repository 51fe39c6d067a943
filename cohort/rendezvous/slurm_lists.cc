#include "cohort/rendezvous/slurm_lists.h"

#include <charconv>
#include <string_view>

#include "cohort/common/check.h"

namespace cohort::rendezvous {
namespace {

// One "[...]" set of a host name: its numbers as written ("07", "08", ...).
std::vector<std::string> expand_range_set(std::string_view set, const auto& bad) {
  std::vector<std::string> numbers;
  size_t pos = 0;
  while (pos <= set.size()) {
    size_t end = set.find(',', pos);
    if (end == std::string_view::npos) end = set.size();
    const std::string_view item = set.substr(pos, end - pos);
    pos = end + 1;
    const size_t dash = item.find('-');
    const std::string_view first = item.substr(0, dash);
    const std::string_view last = dash == std::string_view::npos ? first : item.substr(dash + 1);
    long long lo = 0, hi = 0;
    const auto number = [](std::string_view text, long long& value) {
      if (text.empty() || text.size() > 18) return false;
      const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      return ec == std::errc() && p == text.data() + text.size();
    };
    if (!number(first, lo) || !number(last, hi)) bad("'[" + std::string(set) + "]' is not a range set like [1-3,7]");
    if (hi < lo) bad("the range " + std::string(item) + " runs backwards");
    if (static_cast<unsigned long long>(hi - lo) >= kMaxSlurmListEntries)
      bad("more than " + std::to_string(kMaxSlurmListEntries) + " hosts");
    // Slurm pads to the width of the range's first number ("07-10": 07..10).
    const size_t width = first.size();
    for (long long n = lo; n <= hi; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      numbers.push_back(std::move(digits));
    }
  }
  return numbers;
}

}  // namespace

std::vector<std::string> expand_slurm_host_list(const std::string& variable, const std::string& text) {
  const auto bad = [&](const std::string& why) {
    COHORT_THROW(ConfigError) << variable << "='" << text
                              << "' is not a Slurm host list like 'node[01-04],gpu1': " << why;
  };
  std::vector<std::string> hosts;
  size_t pos = 0;
  while (pos < text.size()) {
    // One name: text and range sets up to a comma outside brackets.
    std::vector<std::string> names{""};
    while (pos < text.size() && text[pos] != ',') {
      if (text[pos] == ']') bad("a ']' without its '['");
      if (text[pos] != '[') {
        for (auto& name : names) name += text[pos];
        ++pos;
        continue;
      }
      const size_t close = text.find(']', pos);
      if (close == std::string::npos) bad("a '[' without its ']'");
      const auto numbers = expand_range_set(std::string_view(text).substr(pos + 1, close - pos - 1), bad);
      if (names.size() * numbers.size() > kMaxSlurmListEntries)
        bad("more than " + std::to_string(kMaxSlurmListEntries) + " hosts");
      std::vector<std::string> product;
      product.reserve(names.size() * numbers.size());
      for (const auto& name : names)
        for (const auto& number : numbers) product.push_back(name + number);
      names = std::move(product);
      pos = close + 1;
    }
    if (names.front().empty()) bad("an empty host name");
    hosts.insert(hosts.end(), names.begin(), names.end());
    if (hosts.size() > kMaxSlurmListEntries) bad("more than " + std::to_string(kMaxSlurmListEntries) + " hosts");
    ++pos;  // the comma
  }
  if (hosts.empty()) bad("no host");
  return hosts;
}

std::vector<int> parse_slurm_tasks_per_node(const std::string& variable, const std::string& text) {
  std::vector<int> counts;
  size_t pos = 0;
  auto bad = [&]() {
    COHORT_THROW(ConfigError) << variable << "='" << text << "' is not a Slurm tasks-per-node list like '2(x3),1'";
  };
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    pos = end + 1;
    int n = 0;
    int repeat = 1;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
    if (ec != std::errc() || n < 0 || item.empty() || item[0] == '-') bad();
    const std::string rest(p, item.data() + item.size());
    if (!rest.empty()) {
      if (rest.size() < 4 || rest.substr(0, 2) != "(x" || rest.back() != ')') bad();
      auto [q, ec2] = std::from_chars(rest.data() + 2, rest.data() + rest.size() - 1, repeat);
      if (ec2 != std::errc() || q != rest.data() + rest.size() - 1 || repeat < 1) bad();
    }
    if (counts.size() + static_cast<size_t>(repeat) > kMaxSlurmListEntries) bad();
    counts.insert(counts.end(), static_cast<size_t>(repeat), n);
  }
  if (counts.empty()) bad();
  return counts;
}

}  // namespace cohort::rendezvous
