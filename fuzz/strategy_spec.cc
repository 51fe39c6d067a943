// libFuzzer harness: the spec parser and validator (cohort/common/spec.h)
// that reads --strategy and every other NAME:key=value flag.
//
// Input: the spec text, validated against a schema set shaped like the
// strategies' (registered from each strategy's file, which is not
// torch-free): names without keys, word keys with and without a word list,
// an integer with a minimum, a number, a boolean, an optional key and a
// required one.
//
// Properties, besides the sanitizers': ConfigError is the only failure, and
// its message is one printable line; a parsed spec has a name and keys made
// of [a-z0-9_] and values without '=' or ','; its str() parses back to it;
// a validated spec holds every key of its schema that is not optional, each
// typed accessor accepts its key's value, and validating it again changes
// nothing.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/common/error.h"
#include "cohort/common/spec.h"
#include "fuzz/fuzz_check.h"

using cohort::Spec;
using cohort::SpecKey;
using cohort::SpecSchema;
using Kind = SpecKey::Kind;

namespace {

const std::vector<SpecSchema>& schemas() {
  static const std::vector<SpecSchema> s = {
      {.name = "auto", .description = "no keys"},
      {.name = "one_device", .description = "no keys"},
      {.name = "mirrored",
       .description = "an integer with a minimum",
       .keys = {{.name = "replicas", .kind = Kind::integer, .default_value = "2", .description = "d", .min = 1}}},
      {.name = "multi_worker",
       .description = "every kind",
       .keys = {{.name = "style", .kind = Kind::word, .default_value = "ddp", .description = "d",
                 .words = {"ddp", "horovod"}},
                {.name = "compression", .kind = Kind::word, .default_value = "none", .description = "d",
                 .words = {"none", "fp16", "bf16"}},
                {.name = "bucket_mb", .kind = Kind::integer, .default_value = "25", .description = "d", .min = 1},
                {.name = "bucket_view", .kind = Kind::boolean, .default_value = "true", .description = "d"},
                {.name = "lr", .kind = Kind::number, .default_value = "0.1", .description = "d"},
                {.name = "tag", .kind = Kind::word, .description = "d", .optional = true},
                {.name = "hosts", .kind = Kind::word, .description = "d"}}},  // required
  };
  return s;
}

bool is_name(std::string_view s) {
  if (s.empty() || s[0] < 'a' || s[0] > 'z') return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

void check_message(const cohort::ConfigError& e) {
  const std::string_view m = e.what();
  FUZZ_CHECK(!m.empty());
  for (char c : m) FUZZ_CHECK(c >= 0x20 && c < 0x7f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Spec parsed;
  try {
    parsed = cohort::parse_spec(text, "strategy");
  } catch (const cohort::ConfigError& e) {
    check_message(e);
    return 0;
  }
  FUZZ_CHECK(is_name(parsed.name));
  for (const auto& [key, value] : parsed.values) {
    FUZZ_CHECK(is_name(key));
    FUZZ_CHECK(!value.empty() && value.find('=') == std::string::npos && value.find(',') == std::string::npos);
  }
  const Spec again = cohort::parse_spec(parsed.str(), "strategy");
  FUZZ_CHECK(again.name == parsed.name && again.values == parsed.values);

  Spec valid;
  try {
    valid = cohort::validate_spec(parsed, schemas(), "strategy");
  } catch (const cohort::ConfigError& e) {
    check_message(e);
    return 0;
  }
  const SpecSchema* schema = nullptr;
  for (const SpecSchema& s : schemas())
    if (s.name == valid.name) schema = &s;
  FUZZ_CHECK(schema != nullptr);
  FUZZ_CHECK(valid.values.size() <= schema->keys.size());
  for (const SpecKey& k : schema->keys) {
    if (!valid.has(k.name)) {
      FUZZ_CHECK(k.optional);
      continue;
    }
    switch (k.kind) {
      case Kind::integer: FUZZ_CHECK(valid.integer(k.name) >= k.min); break;
      case Kind::number: (void)valid.number(k.name); break;
      case Kind::boolean: (void)valid.boolean(k.name); break;
      case Kind::word: FUZZ_CHECK(!valid.word(k.name).empty()); break;
    }
  }
  const Spec revalidated = cohort::validate_spec(valid, schemas(), "strategy");
  FUZZ_CHECK(revalidated.name == valid.name && revalidated.values == valid.values);
  return 0;
}
