// Test support: asserts that a text is exactly one valid JSON document
// (RFC 8259), through cohort's own reader (cohort/common/json.h).
#pragma once

#include <string>

#include "cohort/common/error.h"
#include "cohort/common/json.h"

namespace cohort::testing {

class JsonCheck {
 public:
  // True when `text` is exactly one JSON value (surrounding whitespace
  // allowed); otherwise `error` gets the reader's message (line and column).
  static bool valid(const std::string& text, std::string* error = nullptr) {
    try {
      json::parse(text);
      return true;
    } catch (const ConfigError& e) {
      if (error) *error = e.what();
      return false;
    }
  }
};

}  // namespace cohort::testing
