#include "cohort/common/json.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cohort/common/check.h"

namespace cohort::json {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::null: return "null";
    case Kind::boolean: return "boolean";
    case Kind::number: return "number";
    case Kind::string: return "string";
    case Kind::array: return "array";
    case Kind::object: return "object";
  }
  return "?";
}

std::string a_kind_name(Kind k) {
  return std::string(k == Kind::array || k == Kind::object ? "an " : "a ") + kind_name(k);
}

std::string Value::where() const {
  return (source_ ? *source_ : std::string("<json>")) + ":" + std::to_string(line_) + ":" + std::to_string(column_);
}

namespace {

[[noreturn]] void wrong_kind(const Value& v, Kind want) {
  COHORT_THROW(ConfigError) << v.where() << ": expected " << a_kind_name(want) << ", got " << a_kind_name(v.kind());
}

}  // namespace

bool Value::boolean() const {
  if (kind_ != Kind::boolean) wrong_kind(*this, Kind::boolean);
  return bool_;
}

double Value::number() const {
  if (kind_ != Kind::number) wrong_kind(*this, Kind::number);
  return number_;
}

const std::string& Value::string() const {
  if (kind_ != Kind::string) wrong_kind(*this, Kind::string);
  return string_;
}

const std::vector<Value>& Value::items() const {
  if (kind_ != Kind::array) wrong_kind(*this, Kind::array);
  return items_;
}

const std::vector<Value::Member>& Value::members() const {
  if (kind_ != Kind::object) wrong_kind(*this, Kind::object);
  return members_;
}

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::object) return nullptr;
  for (const auto& [k, v] : members_)
    if (k == key) return &v;
  return nullptr;
}

const Value& Value::at(std::string_view key) const {
  if (kind_ != Kind::object) wrong_kind(*this, Kind::object);
  const Value* v = find(key);
  COHORT_CHECK_AS(ConfigError, v != nullptr) << where() << ": missing field '" << key << "'";
  return *v;
}

// Recursive descent over the whole text, tracking line and column.
class Parser {
 public:
  Parser(std::string_view text, std::string_view source)
      : t_(text), source_(std::make_shared<const std::string>(source)) {}

  Value document() {
    skip_ws();
    Value v = value(0);
    skip_ws();
    if (at_ != t_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 512;

  [[noreturn]] void fail(const std::string& what) const {
    if (at_ >= t_.size())
      COHORT_THROW(ConfigError) << *source_ << ":" << line_ << ":" << column_ << ": " << what
                                << " (the document ends here: truncated?)";
    COHORT_THROW(ConfigError) << *source_ << ":" << line_ << ":" << column_ << ": " << what;
  }

  char peek() const { return at_ < t_.size() ? t_[at_] : '\0'; }

  void advance() {
    if (t_[at_] == '\n') {
      ++line_;
      column_ = 1;
    } else {
      ++column_;
    }
    ++at_;
  }

  void skip_ws() {
    while (at_ < t_.size() && (t_[at_] == ' ' || t_[at_] == '\t' || t_[at_] == '\r' || t_[at_] == '\n')) advance();
  }

  void expect(char c, const char* what) {
    if (peek() != c) fail(std::string("expected ") + what);
    advance();
  }

  Value start(Kind k) {
    Value v;
    v.kind_ = k;
    v.source_ = source_;
    v.line_ = line_;
    v.column_ = column_;
    return v;
  }

  Value value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 512 levels");
    switch (peek()) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': {
        Value v = start(Kind::string);
        v.string_ = string();
        return v;
      }
      case 't': return literal("true", Kind::boolean, true);
      case 'f': return literal("false", Kind::boolean, false);
      case 'n': return literal("null", Kind::null, false);
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return number();
        fail(at_ >= t_.size() ? "expected a value" : std::string("unexpected character '") + peek() + "'");
    }
  }

  Value literal(const char* word, Kind k, bool b) {
    Value v = start(k);
    const size_t n = std::strlen(word);
    if (t_.substr(at_, n) != word) fail(std::string("expected '") + word + "'");
    for (size_t i = 0; i < n; ++i) advance();
    v.bool_ = b;
    return v;
  }

  Value object(int depth) {
    Value v = start(Kind::object);
    advance();
    skip_ws();
    if (peek() == '}') {
      advance();
      return v;
    }
    while (true) {
      skip_ws();
      if (peek() != '"') fail("expected a member name in double quotes");
      const size_t key_line = line_, key_column = column_;
      std::string key = string();
      for (const auto& m : v.members_)
        if (m.first == key) {
          line_ = key_line;
          column_ = key_column;
          fail("field '" + key + "' appears twice in this object");
        }
      skip_ws();
      expect(':', "':' after the member name");
      skip_ws();
      Value member = value(depth + 1);
      v.members_.emplace_back(std::move(key), std::move(member));
      skip_ws();
      if (peek() == ',') {
        advance();
        continue;
      }
      expect('}', "',' or '}' in the object");
      return v;
    }
  }

  Value array(int depth) {
    Value v = start(Kind::array);
    advance();
    skip_ws();
    if (peek() == ']') {
      advance();
      return v;
    }
    while (true) {
      skip_ws();
      v.items_.push_back(value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        advance();
        continue;
      }
      expect(']', "',' or ']' in the array");
      return v;
    }
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  uint32_t hex4() {
    uint32_t cp = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) fail("expected 4 hex digits after \\u");
      cp = cp * 16 + uint32_t(d);
      advance();
    }
    return cp;
  }

  std::string string() {
    advance();  // the opening quote
    std::string out;
    while (true) {
      if (at_ >= t_.size()) fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(t_[at_]);
      if (c == '"') {
        advance();
        return out;
      }
      if (c < 0x20) fail("control character in a string (escape it)");
      if (c != '\\') {
        out += static_cast<char>(c);
        advance();
        continue;
      }
      advance();
      const char e = peek();
      if (at_ >= t_.size()) fail("unterminated escape");
      advance();
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xd800 && cp < 0xdc00) {
            // A high surrogate must be followed by its low half.
            if (peek() != '\\') fail("unpaired surrogate in \\u escape");
            advance();
            if (peek() != 'u') fail("unpaired surrogate in \\u escape");
            advance();
            const uint32_t lo = hex4();
            if (lo < 0xdc00 || lo >= 0xe000) fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            fail("unpaired surrogate in \\u escape");
          }
          put_utf8(out, cp);
          break;
        }
        default: fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  Value number() {
    Value v = start(Kind::number);
    const size_t begin = at_;
    auto digits = [&] {
      size_t n = 0;
      while (peek() >= '0' && peek() <= '9') {
        advance();
        ++n;
      }
      return n;
    };
    if (peek() == '-') advance();
    if (peek() == '0') {
      advance();
      if (peek() >= '0' && peek() <= '9') fail("leading zeros are not allowed in a number");
    } else if (digits() == 0) {
      fail("expected a digit");
    }
    if (peek() == '.') {
      advance();
      if (digits() == 0) fail("expected a digit after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      advance();
      if (peek() == '+' || peek() == '-') advance();
      if (digits() == 0) fail("expected a digit in the exponent");
    }
    // strtod on a bounded copy: from_chars for double is not in every
    // standard library this builds with.
    const std::string text(t_.substr(begin, at_ - begin));
    errno = 0;
    v.number_ = std::strtod(text.c_str(), nullptr);
    if (errno == ERANGE && (v.number_ > 1 || v.number_ < -1)) {
      line_ = v.line_;
      column_ = v.column_;
      fail("number " + text + " is out of range");
    }
    return v;
  }

  std::string_view t_;
  std::shared_ptr<const std::string> source_;
  size_t at_ = 0;
  size_t line_ = 1, column_ = 1;
};

Value parse(std::string_view text, std::string_view source) { return Parser(text, source).document(); }

Value parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  COHORT_CHECK_AS(ConfigError, in.good()) << "cannot open '" << path << "': " << std::strerror(errno);
  std::ostringstream text;
  text << in.rdbuf();
  COHORT_CHECK_AS(ConfigError, !in.bad()) << "cannot read '" << path << "'";
  return parse(text.str(), path);
}

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

}  // namespace cohort::json
