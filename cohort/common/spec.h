// Specs: one string that names a thing and sets its options, as a command-line
// flag carries it:
//
//   NAME[:key=value,key=value,...]       multi_worker:style=horovod
//
// parse_spec() splits the text; validate_spec() checks it against what the
// named thing accepts (its keys, each with a kind, a default and a one-line
// description) and fills in the defaults. Every error is one ConfigError line
// that names what is wrong and what would be right:
//
//   strategy 'mirrored': unknown key 'replica' (valid keys: replicas)
//   strategy 'mirrored': replicas must be an integer >= 1, got 'two'
//
// Torch-free, so that the parser is fuzzed on its own (fuzz/).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cohort {

// One key a spec may set.
struct SpecKey {
  enum class Kind { integer, number, boolean, word };
  std::string name;
  Kind kind = Kind::word;
  std::string default_value;       // taken when the spec leaves the key out
  std::string description;         // one line, for --help
  std::vector<std::string> words;  // Kind::word: the allowed values (empty: any non-empty word)
  int64_t min = 0;                 // Kind::integer: the smallest value allowed
  // With no default: an optional key may stay unset (Spec::has() says so), a
  // key that is not optional is required.
  bool optional = false;
};

// What a NAME accepts.
struct SpecSchema {
  std::string name;
  std::string description;  // one line
  std::vector<SpecKey> keys;
};

// A parsed spec: the name and the key=value pairs as written.
struct Spec {
  std::string name;
  std::map<std::string, std::string> values;

  bool has(const std::string& key) const { return values.count(key) != 0; }
  // The value of `key` (ConfigError when unset); the typed forms convert it
  // as validate_spec() checked it.
  const std::string& word(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;
  bool boolean(const std::string& key) const;
  // The spec written back: "name:key=value,..." in key order.
  std::string str() const;
};

// Splits `text` (ConfigError naming `what`, e.g. "strategy", on bad syntax:
// empty, no name, a pair without '=', an empty key or value, a key twice).
Spec parse_spec(const std::string& text, const std::string& what);

// Checks `spec` against the schema of its name among `schemas` (unknown name,
// unknown key, a value of the wrong kind: ConfigError naming it and the valid
// choices) and returns it with every defaulted key filled in.
Spec validate_spec(const Spec& spec, const std::vector<SpecSchema>& schemas, const std::string& what);

// parse_spec then validate_spec.
Spec parse_and_validate_spec(const std::string& text, const std::vector<SpecSchema>& schemas,
                             const std::string& what);

// The schemas as lines for --help:
//   mirrored            one process, several replicas ...
//       replicas=2      replicas (threads) in this process
std::string format_spec_schemas(const std::vector<SpecSchema>& schemas);

}  // namespace cohort
