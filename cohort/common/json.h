// A small JSON reader (RFC 8259) and string escaping, for cohort's own
// files: the engine's timeline, the simulator's topology and workload files,
// metrics lines.
//
//   json::Value doc = json::parse(text, "topology.json");
//   const json::Value* links = doc.find("links");
//   double a = links->at("network").at("alpha_s").number();
//
// parse() is strict: one value, surrounding whitespace allowed, no comments,
// no trailing commas, strings must be valid UTF-8 escapes-wise (\uXXXX pairs
// are decoded to UTF-8). A syntax error throws ConfigError naming the source,
// the line and column, and what was expected there. Object members keep their
// file order; a key repeated in one object is an error (it would silently
// shadow the first). Nesting deeper than 512 levels is an error, so that a
// hostile file cannot overflow the stack.
//
// Each Value remembers the line and column where it starts, so callers can
// point at the offending field in their own errors (see where()).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cohort::json {

enum class Kind { null, boolean, number, string, array, object };

// "null", "boolean", "number", "string", "array", "object".
const char* kind_name(Kind k);
// The same with its article, for messages: "a number", "an array".
std::string a_kind_name(Kind k);

class Value {
 public:
  using Member = std::pair<std::string, Value>;

  Value() = default;

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::null; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_number() const { return kind_ == Kind::number; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_object() const { return kind_ == Kind::object; }

  // Typed access; each throws ConfigError ("<source>:L:C: expected a number,
  // got a string") when the kind differs.
  bool boolean() const;
  double number() const;
  const std::string& string() const;
  const std::vector<Value>& items() const;     // array elements
  const std::vector<Member>& members() const;  // object members, in file order

  // Object lookup: nullptr when absent (or when this is not an object).
  const Value* find(std::string_view key) const;
  // Object lookup that throws ConfigError naming the missing key.
  const Value& at(std::string_view key) const;

  // "<source>:<line>:<column>" of the value's first character.
  std::string where() const;
  size_t line() const { return line_; }
  size_t column() const { return column_; }

 private:
  friend class Parser;
  Kind kind_ = Kind::null;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Value> items_;
  std::vector<Member> members_;
  std::shared_ptr<const std::string> source_;  // shared by every value of one document
  size_t line_ = 0, column_ = 0;
};

// Parses `text` (the whole document). `source` names it in errors (a path).
Value parse(std::string_view text, std::string_view source = "<json>");

// Reads and parses a file; ConfigError when it cannot be read.
Value parse_file(const std::string& path);

// The body of a JSON string literal for `s` (quotes not included).
std::string escape(std::string_view s);

}  // namespace cohort::json
