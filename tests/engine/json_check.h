// Test support: a strict JSON syntax check (RFC 8259), enough to assert that
// a timeline file is a complete, valid document.
#pragma once

#include <cctype>
#include <cstring>
#include <string>

namespace cohort::testing {

class JsonCheck {
 public:
  // True when `text` is exactly one JSON value (surrounding whitespace allowed).
  static bool valid(const std::string& text, std::string* error = nullptr) {
    JsonCheck c(text);
    const bool ok = c.value() && (c.ws(), c.at_ == text.size());
    if (!ok && error) *error = "invalid JSON near offset " + std::to_string(c.at_);
    return ok;
  }

 private:
  explicit JsonCheck(const std::string& t) : t_(t) {}
  char peek() const { return at_ < t_.size() ? t_[at_] : '\0'; }
  void ws() {
    while (at_ < t_.size() && std::strchr(" \t\r\n", t_[at_])) ++at_;
  }
  bool lit(const char* s) {
    const size_t n = std::strlen(s);
    if (t_.compare(at_, n, s) != 0) return false;
    at_ += n;
    return true;
  }
  bool value() {
    ws();
    switch (peek()) {
      case '{': return object();
      case '[': return array();
      case '"': return string();
      case 't': return lit("true");
      case 'f': return lit("false");
      case 'n': return lit("null");
      default: return number();
    }
  }
  bool object() {
    ++at_;
    ws();
    if (peek() == '}') return ++at_, true;
    while (true) {
      ws();
      if (!string()) return false;
      ws();
      if (peek() != ':') return false;
      ++at_;
      if (!value()) return false;
      ws();
      if (peek() == ',') { ++at_; continue; }
      if (peek() == '}') return ++at_, true;
      return false;
    }
  }
  bool array() {
    ++at_;
    ws();
    if (peek() == ']') return ++at_, true;
    while (true) {
      if (!value()) return false;
      ws();
      if (peek() == ',') { ++at_; continue; }
      if (peek() == ']') return ++at_, true;
      return false;
    }
  }
  bool string() {
    if (peek() != '"') return false;
    ++at_;
    while (at_ < t_.size()) {
      const unsigned char c = static_cast<unsigned char>(t_[at_++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c == '\\') {
        const char e = peek();
        ++at_;
        if (e == 'u') {
          for (int i = 0; i < 4; ++i)
            if (!std::isxdigit(static_cast<unsigned char>(peek()))) return false; else ++at_;
        } else if (!std::strchr("\"\\/bfnrt", e) || e == '\0') {
          return false;
        }
      }
    }
    return false;
  }
  bool number() {
    const size_t start = at_;
    if (peek() == '-') ++at_;
    if (peek() == '0') ++at_;
    else if (std::isdigit(static_cast<unsigned char>(peek()))) while (std::isdigit(static_cast<unsigned char>(peek()))) ++at_;
    else return false;
    if (peek() == '.') {
      ++at_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) return false;
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++at_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++at_;
      if (peek() == '+' || peek() == '-') ++at_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) return false;
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++at_;
    }
    return at_ > start;
  }
  const std::string& t_;
  size_t at_ = 0;
};

}  // namespace cohort::testing
