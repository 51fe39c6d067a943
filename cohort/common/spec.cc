#include "cohort/common/spec.h"

#include <charconv>
#include <sstream>

#include "cohort/common/check.h"

namespace cohort {
namespace {

bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

bool is_name(const std::string& s) {
  if (s.empty() || !(s[0] >= 'a' && s[0] <= 'z')) return false;
  for (char c : s)
    if (!is_name_char(c)) return false;
  return true;
}

// `text` shown in an error: printable, and not unboundedly long.
std::string shown(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > 64) out += "...";
  return out;
}

template <typename T>
bool parse_whole(const std::string& text, T& value) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end && !text.empty();
}

bool parse_boolean(const std::string& text, bool& value) {
  if (text == "true" || text == "1" || text == "yes" || text == "on") return value = true, true;
  if (text == "false" || text == "0" || text == "no" || text == "off") return value = false, true;
  return false;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// Checks one value against its key; returns what is wrong, or "".
std::string check_value(const SpecKey& key, const std::string& value) {
  switch (key.kind) {
    case SpecKey::Kind::integer: {
      int64_t v = 0;
      if (!parse_whole(value, v) || v < key.min)
        return key.name + " must be an integer >= " + std::to_string(key.min) + ", got '" + shown(value) + "'";
      return "";
    }
    case SpecKey::Kind::number: {
      double v = 0;
      if (!parse_whole(value, v)) return key.name + " must be a number, got '" + shown(value) + "'";
      return "";
    }
    case SpecKey::Kind::boolean: {
      bool v = false;
      if (!parse_boolean(value, v)) return key.name + " must be true or false, got '" + shown(value) + "'";
      return "";
    }
    case SpecKey::Kind::word:
      if (key.words.empty()) return "";
      for (const std::string& w : key.words)
        if (w == value) return "";
      return key.name + " must be one of " + joined(key.words) + ", got '" + shown(value) + "'";
  }
  return "";
}

}  // namespace

const std::string& Spec::word(const std::string& key) const {
  auto it = values.find(key);
  COHORT_CHECK_AS(ConfigError, it != values.end()) << name << ": no value for '" << key << "'";
  return it->second;
}

int64_t Spec::integer(const std::string& key) const {
  int64_t v = 0;
  COHORT_CHECK_AS(ConfigError, parse_whole(word(key), v)) << name << ": " << key << " is not an integer";
  return v;
}

double Spec::number(const std::string& key) const {
  double v = 0;
  COHORT_CHECK_AS(ConfigError, parse_whole(word(key), v)) << name << ": " << key << " is not a number";
  return v;
}

bool Spec::boolean(const std::string& key) const {
  bool v = false;
  COHORT_CHECK_AS(ConfigError, parse_boolean(word(key), v)) << name << ": " << key << " is not true or false";
  return v;
}

std::string Spec::str() const {
  std::string out = name;
  char sep = ':';
  for (const auto& [k, v] : values) {
    out += sep + k + "=" + v;
    sep = ',';
  }
  return out;
}

Spec parse_spec(const std::string& text, const std::string& what) {
  COHORT_CHECK_AS(ConfigError, !text.empty()) << what << ": empty spec (expected NAME[:key=value,...])";
  Spec spec;
  const size_t colon = text.find(':');
  spec.name = text.substr(0, colon);
  COHORT_CHECK_AS(ConfigError, is_name(spec.name))
      << what << ": '" << shown(spec.name) << "' is not a name (expected NAME[:key=value,...])";
  if (colon == std::string::npos) return spec;
  const std::string rest = text.substr(colon + 1);
  COHORT_CHECK_AS(ConfigError, !rest.empty()) << what << " '" << spec.name << "': nothing after ':'";
  size_t start = 0;
  while (start <= rest.size()) {
    size_t end = rest.find(',', start);
    if (end == std::string::npos) end = rest.size();
    const std::string pair = rest.substr(start, end - start);
    const size_t eq = pair.find('=');
    COHORT_CHECK_AS(ConfigError, eq != std::string::npos)
        << what << " '" << spec.name << "': '" << shown(pair) << "' is not key=value";
    const std::string key = pair.substr(0, eq), value = pair.substr(eq + 1);
    COHORT_CHECK_AS(ConfigError, is_name(key))
        << what << " '" << spec.name << "': '" << shown(key) << "' is not a key name";
    COHORT_CHECK_AS(ConfigError, !value.empty() && value.find('=') == std::string::npos)
        << what << " '" << spec.name << "': " << key << " needs one value, got '" << shown(value) << "'";
    COHORT_CHECK_AS(ConfigError, spec.values.emplace(key, value).second)
        << what << " '" << spec.name << "': " << key << " is set twice";
    start = end + 1;
  }
  return spec;
}

Spec validate_spec(const Spec& spec, const std::vector<SpecSchema>& schemas, const std::string& what) {
  const SpecSchema* schema = nullptr;
  std::vector<std::string> names;
  for (const SpecSchema& s : schemas) {
    names.push_back(s.name);
    if (s.name == spec.name) schema = &s;
  }
  COHORT_CHECK_AS(ConfigError, schema != nullptr)
      << "unknown " << what << " '" << shown(spec.name) << "' (valid: " << joined(names) << ")";
  std::vector<std::string> keys;
  for (const SpecKey& k : schema->keys) keys.push_back(k.name);
  Spec out{spec.name, {}};
  for (const auto& [key, value] : spec.values) {
    const SpecKey* k = nullptr;
    for (const SpecKey& candidate : schema->keys)
      if (candidate.name == key) k = &candidate;
    COHORT_CHECK_AS(ConfigError, k != nullptr)
        << what << " '" << spec.name << "': unknown key '" << shown(key) << "' ("
        << (keys.empty() ? std::string("it takes no keys") : "valid keys: " + joined(keys)) << ")";
    const std::string problem = check_value(*k, value);
    COHORT_CHECK_AS(ConfigError, problem.empty()) << what << " '" << spec.name << "': " << problem;
    out.values[key] = value;
  }
  for (const SpecKey& k : schema->keys) {
    if (out.has(k.name)) continue;
    if (!k.default_value.empty()) {
      out.values[k.name] = k.default_value;
    } else {
      COHORT_CHECK_AS(ConfigError, k.optional) << what << " '" << spec.name << "': " << k.name << " is required";
    }
  }
  return out;
}

Spec parse_and_validate_spec(const std::string& text, const std::vector<SpecSchema>& schemas,
                             const std::string& what) {
  return validate_spec(parse_spec(text, what), schemas, what);
}

std::string format_spec_schemas(const std::vector<SpecSchema>& schemas) {
  std::ostringstream os;
  for (const SpecSchema& s : schemas) {
    os << "  " << s.name;
    for (size_t pad = s.name.size(); pad < 24; ++pad) os << ' ';
    os << s.description << '\n';
    for (const SpecKey& k : s.keys) {
      std::string left = "      " + k.name + "=" + (k.default_value.empty() ? "..." : k.default_value);
      os << left;
      for (size_t pad = left.size(); pad < 26; ++pad) os << ' ';
      os << ' ' << k.description;
      if (!k.words.empty()) os << " (" << joined(k.words) << ")";
      os << '\n';
    }
  }
  return os.str();
}

}  // namespace cohort
