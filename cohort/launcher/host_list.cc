#include "cohort/launcher/host_list.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cohort/launcher/options.h"

namespace cohort::launcher {
namespace {

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// A positive slot count, or 0 when `text` is not one.
int parse_slots(std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < 1 || value > kMaxSlotsPerHost) return 0;
  return value;
}

// Adds `slots` to `name`, merging repeated hosts; `where` prefixes errors.
void add_host(std::vector<HostSlots>& hosts, std::string name, int slots, const std::string& where) {
  for (HostSlots& h : hosts)
    if (h.name == name) {
      if (h.slots + slots > kMaxSlotsPerHost)
        throw UsageError(where + "host " + quoted(name) + " has more than " + std::to_string(kMaxSlotsPerHost) +
                         " slots in all");
      h.slots += slots;
      return;
    }
  if (static_cast<int>(hosts.size()) >= kMaxHosts)
    throw UsageError(where + "more than " + std::to_string(kMaxHosts) + " hosts");
  hosts.push_back({std::move(name), slots});
}

std::string_view trim(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const size_t last = s.find_last_not_of(" \t\r");
  return s.substr(first, last - first + 1);
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) ++i;
    const size_t start = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '\t' && s[i] != '\r') ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

}  // namespace

std::string host_name_problem(std::string_view name) {
  if (name.empty()) return "the host name is empty";
  if (name.size() > 255) return "the host name is longer than 255 characters";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-' || c == '@';
    if (!ok) {
      std::string shown = (static_cast<unsigned char>(c) < 0x20) ? "a control character" : quoted(std::string(1, c));
      return "the host name " + quoted(name) + " contains " + shown +
             " (use letters, digits, '.', '_', '-' and '@')";
    }
  }
  if (name.front() == '-') return "the host name " + quoted(name) + " starts with '-'";
  if (name.find('@') != name.rfind('@') || name.front() == '@' || name.back() == '@')
    return "the host name " + quoted(name) + " is not host or user@host";
  return {};
}

std::string_view host_without_user(std::string_view host) {
  const size_t at = host.find('@');
  return at == std::string_view::npos ? host : host.substr(at + 1);
}

std::vector<HostSlots> parse_host_list(std::string_view text) {
  std::vector<HostSlots> hosts;
  if (text.empty()) throw UsageError("-H needs hosts, e.g. -H node1:2,node2:2");
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string_view entry = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    const std::string where = "-H " + quoted(entry) + ": ";
    if (entry.empty()) throw UsageError("-H " + quoted(text) + " has an empty entry");
    std::string_view name = entry;
    int slots = 1;
    if (const size_t colon = entry.rfind(':'); colon != std::string_view::npos) {
      name = entry.substr(0, colon);
      slots = parse_slots(entry.substr(colon + 1));
      if (slots == 0)
        throw UsageError(where + "slots must be an integer 1.." + std::to_string(kMaxSlotsPerHost) + ", got " +
                         quoted(entry.substr(colon + 1)));
    }
    if (const std::string problem = host_name_problem(name); !problem.empty()) throw UsageError(where + problem);
    add_host(hosts, std::string(name), slots, where);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return hosts;
}

std::vector<HostSlots> parse_hostfile(std::string_view text, const std::string& source) {
  std::vector<HostSlots> hosts;
  int line_number = 0;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t newline = text.find('\n', start);
    std::string_view line = text.substr(start, newline == std::string_view::npos ? text.npos : newline - start);
    start = newline == std::string_view::npos ? text.size() + 1 : newline + 1;
    ++line_number;
    const std::string raw = std::string(trim(line));
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    const std::vector<std::string_view> w = words(line);
    if (w.empty()) continue;
    const std::string where = "hostfile " + source + ":" + std::to_string(line_number) + ": ";
    const std::string got = ", got " + quoted(raw);
    if (const std::string problem = host_name_problem(w[0]); !problem.empty()) {
      if (w[0].find('=') != std::string_view::npos)
        throw UsageError(where + "a line must start with a host name, then slots=N" + got);
      throw UsageError(where + problem);
    }
    int slots = 1;
    bool slots_seen = false;
    for (size_t i = 1; i < w.size(); ++i) {
      const size_t eq = w[i].find('=');
      if (eq == std::string_view::npos)
        throw UsageError(where + "expected 'host [slots=N]' (one host per line)" + got);
      const std::string_view key = w[i].substr(0, eq);
      const std::string_view value = w[i].substr(eq + 1);
      if (key == "slots" || key == "max_slots") {
        const int n = parse_slots(value);
        if (n == 0)
          throw UsageError(where + std::string(key) + " must be an integer 1.." + std::to_string(kMaxSlotsPerHost) +
                           ", got " + quoted(value));
        if (key == "slots") {
          if (slots_seen) throw UsageError(where + "slots is given twice" + got);
          slots = n;
          slots_seen = true;
        }
      } else {
        throw UsageError(where + "unknown attribute " + quoted(key) + " (cohortrun understands slots=N)" + got);
      }
    }
    add_host(hosts, std::string(w[0]), slots, where);
  }
  if (hosts.empty()) throw UsageError("hostfile " + source + ": no hosts (expected lines like 'node1 slots=2')");
  return hosts;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw UsageError("--hostfile " + quoted(path) + ": cannot read it: " + std::strerror(errno));
  std::stringstream text;
  text << file.rdbuf();
  return parse_hostfile(text.str(), path);
}

int total_slots(const std::vector<HostSlots>& hosts) {
  int n = 0;
  for (const HostSlots& h : hosts) n += h.slots;
  return n;
}

std::string format_host_list(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const HostSlots& h : hosts) out += (out.empty() ? "" : ",") + h.name + ":" + std::to_string(h.slots);
  return out;
}

}  // namespace cohort::launcher
