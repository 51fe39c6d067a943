// Check and throw macros. A failure throws a cohort error whose what() leads
// with what went wrong, in the caller's words (streamed after the macro); a
// comparison adds both operand values. Where it was raised (file, line and
// the failed condition) is kept apart, in Error::where(), and logged at
// debug level (COHORT_LOG_LEVEL=debug):
//
//   COHORT_CHECK(fd >= 0) << "cannot open " << path << ": " << std::strerror(errno);
//     -> what(): "cannot open /x: Permission denied"
//        where(): "file.cc:12: check failed: fd >= 0"
//   COHORT_CHECK_EQ(send.count, recv.count) << "allreduce buffers differ";
//     -> what(): "allreduce buffers differ (send.count == recv.count: 12 vs 13)"
//   COHORT_CHECK_EQ(send.count, recv.count);  // no message: the check is all there is
//     -> what(): "check failed: send.count == recv.count (12 vs 13)"
//   COHORT_CHECK_AS(ConfigError, n > 0) << "COHORT_SIZE must be positive";
//   COHORT_THROW(TimeoutError) << "no reply from rank " << r;
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "cohort/common/error.h"

namespace cohort::detail {

// The text of a failure: the caller's message (whatever is streamed after
// the macro), the failed condition and operand values, and the location.
class Message {
 public:
  // `condition` is empty for COHORT_THROW; `values` ("12 vs 13") only for
  // the comparison forms.
  Message(const char* file, int line, const char* kind, const char* condition = "", std::string values = {})
      : file_(file), line_(line), kind_(kind), condition_(condition), values_(std::move(values)) {}
  template <typename T>
  Message& operator<<(const T& value) {
    text_ << value;
    return *this;
  }
  // what(): the message first, then the operand values; the condition only
  // when the caller gave no message.
  std::string what() const;
  // "file.cc:42: check failed: condition (values)"; "file.cc:42" for a throw.
  std::string where() const;
  const char* kind() const { return kind_; }

 private:
  const char* file_;
  int line_;
  const char* kind_;
  const char* condition_;
  std::string values_;
  std::ostringstream text_;
};

// Logs, at debug level, that `kind` is being raised (where, then what).
void log_raise(const Message& m);

// `Raise<E>() & message << ...` throws E once the whole message is streamed
// (`&` binds looser than `<<`). The operator is [[noreturn]], so the compiler
// knows a function ending in COHORT_THROW returns nothing.
template <typename E>
struct Raise {
  [[noreturn]] void operator&(const Message& m) const {
    log_raise(m);
    throw E(m.what(), m.where());
  }
};

template <typename T>
void print_operand(std::ostream& os, const T& v) {
  if constexpr (requires { os << v; }) {
    if constexpr (std::is_same_v<T, char> || std::is_same_v<T, signed char> ||
                  std::is_same_v<T, unsigned char>)
      os << static_cast<int>(v);
    else
      os << v;
  } else {
    os << "<unprintable>";
  }
}

// Returns nullopt when `pred(a, b)` holds, else the operands: "a vs b".
template <typename A, typename B, typename Pred>
std::optional<std::string> check_op(const A& a, const B& b, Pred pred) {
  if (pred(a, b)) [[likely]]
    return std::nullopt;
  std::ostringstream os;
  print_operand(os, a);
  os << " vs ";
  print_operand(os, b);
  return os.str();
}

}  // namespace cohort::detail

#define COHORT_THROW(Kind) \
  ::cohort::detail::Raise<::cohort::Kind>() & ::cohort::detail::Message(__FILE__, __LINE__, #Kind)

#define COHORT_CHECK_AS(Kind, cond)                                          \
  if (cond) [[likely]]                                                       \
    ;                                                                        \
  else                                                                       \
    ::cohort::detail::Raise<::cohort::Kind>() &                              \
        ::cohort::detail::Message(__FILE__, __LINE__, #Kind, #cond)

#define COHORT_CHECK(cond) COHORT_CHECK_AS(Error, cond)

#define COHORT_CHECK_OP_AS_(Kind, a, op, b)                                                   \
  if (auto cohort_check_failure_ = ::cohort::detail::check_op(                                \
          (a), (b), [](const auto& x, const auto& y) { return x op y; });                     \
      !cohort_check_failure_) [[likely]]                                                      \
    ;                                                                                         \
  else                                                                                        \
    ::cohort::detail::Raise<::cohort::Kind>() &                                               \
        ::cohort::detail::Message(__FILE__, __LINE__, #Kind, #a " " #op " " #b,               \
                                  std::move(*cohort_check_failure_))

#define COHORT_CHECK_EQ(a, b) COHORT_CHECK_OP_AS_(Error, a, ==, b)
#define COHORT_CHECK_NE(a, b) COHORT_CHECK_OP_AS_(Error, a, !=, b)
#define COHORT_CHECK_LT(a, b) COHORT_CHECK_OP_AS_(Error, a, <, b)
#define COHORT_CHECK_LE(a, b) COHORT_CHECK_OP_AS_(Error, a, <=, b)
#define COHORT_CHECK_GT(a, b) COHORT_CHECK_OP_AS_(Error, a, >, b)
#define COHORT_CHECK_GE(a, b) COHORT_CHECK_OP_AS_(Error, a, >=, b)
// The same comparisons throwing a chosen kind, e.g.
// COHORT_CHECK_EQ_AS(MismatchError, mine.count, theirs.count) << "tensor " << name;
#define COHORT_CHECK_EQ_AS(Kind, a, b) COHORT_CHECK_OP_AS_(Kind, a, ==, b)
#define COHORT_CHECK_LE_AS(Kind, a, b) COHORT_CHECK_OP_AS_(Kind, a, <=, b)
#define COHORT_CHECK_LT_AS(Kind, a, b) COHORT_CHECK_OP_AS_(Kind, a, <, b)
#define COHORT_CHECK_GE_AS(Kind, a, b) COHORT_CHECK_OP_AS_(Kind, a, >=, b)
