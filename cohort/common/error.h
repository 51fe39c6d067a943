// The error hierarchy. Every error cohort raises derives from cohort::Error;
// the kinds are the ones a user can act on. what() says what went wrong (and
// what to do, where cohort knows); where() says where in cohort's source it
// was raised, for debugging.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace cohort {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, std::string where = {})
      : std::runtime_error(what), where_(std::move(where)) {}
  // "file.cc:42: check failed: condition" for errors raised by the macros of
  // cohort/common/check.h; empty for errors made otherwise.
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// Bad flags, environment variables, files or arguments: fix the input.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// An operation did not complete within its deadline.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer died or became unreachable. `rank()` is the lost peer (-1 when not
// known), `host()` its host when known, `last_words()` what it said before
// going (its error message or last output lines), when known.
class PeerLostError : public Error {
 public:
  PeerLostError(const std::string& what, int rank, std::string host = {},
                std::string last_words = {})
      : Error(what), rank_(rank), host_(std::move(host)), last_words_(std::move(last_words)) {}
  int rank() const { return rank_; }
  const std::string& host() const { return host_; }
  const std::string& last_words() const { return last_words_; }

 private:
  int rank_;
  std::string host_;
  std::string last_words_;
};

// Ranks disagree about an operation (tensor name, shape, dtype, op, root,
// tag): the message names the operation, the ranks and what each sent.
class MismatchError : public Error {
 public:
  using Error::Error;
};

}  // namespace cohort
