// Check and throw macros. Failures throw a cohort error whose message carries
// the source location, the failed condition, both operand values for the
// comparison forms, and whatever the caller streamed after the macro:
//
//   COHORT_CHECK(fd >= 0) << "open " << path << ": " << std::strerror(errno);
//   COHORT_CHECK_EQ(send.count, recv.count) << "allreduce buffers differ";
//     -> cohort::Error: comm.cc:42: check failed: send.count == recv.count
//        (12 vs 13): allreduce buffers differ
//   COHORT_CHECK_AS(ConfigError, n > 0) << "COHORT_SIZE must be positive";
//   COHORT_THROW(TimeoutError) << "no reply from rank " << r;
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "cohort/common/error.h"

namespace cohort::detail {

// The text of a failure: location, what failed, then whatever the caller
// streams after the macro.
class Message {
 public:
  Message(const char* file, int line, std::string what) {
    const char* base = file;
    for (const char* p = file; *p; ++p)
      if (*p == '/') base = p + 1;
    stream_ << base << ':' << line << ": " << what;
  }
  template <typename T>
  Message& operator<<(const T& value) {
    if (!separated_) {
      stream_ << ": ";
      separated_ = true;
    }
    stream_ << value;
    return *this;
  }
  std::string str() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  bool separated_ = false;
};

// `Raise<E>() & message << ...` throws E once the whole message is streamed
// (`&` binds looser than `<<`). The operator is [[noreturn]], so the compiler
// knows a function ending in COHORT_THROW returns nothing.
template <typename E>
struct Raise {
  [[noreturn]] void operator&(const Message& m) const { throw E(m.str()); }
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

// Returns nullopt when `pred(a, b)` holds, else "expr (a vs b)".
template <typename A, typename B, typename Pred>
std::optional<std::string> check_op(const A& a, const B& b, Pred pred, const char* expr) {
  if (pred(a, b)) [[likely]]
    return std::nullopt;
  std::ostringstream os;
  os << "check failed: " << expr << " (";
  print_operand(os, a);
  os << " vs ";
  print_operand(os, b);
  os << ')';
  return os.str();
}

}  // namespace cohort::detail

#define COHORT_THROW(Kind) \
  ::cohort::detail::Raise<::cohort::Kind>() & ::cohort::detail::Message(__FILE__, __LINE__, #Kind)

#define COHORT_CHECK_AS(Kind, cond)                                          \
  if (cond) [[likely]]                                                       \
    ;                                                                        \
  else                                                                       \
    ::cohort::detail::Raise<::cohort::Kind>() &                             \
        ::cohort::detail::Message(__FILE__, __LINE__, "check failed: " #cond)

#define COHORT_CHECK(cond) COHORT_CHECK_AS(Error, cond)

#define COHORT_CHECK_OP_AS_(Kind, a, op, b)                                              \
  if (auto cohort_check_failure_ = ::cohort::detail::check_op(                           \
          (a), (b), [](const auto& x, const auto& y) { return x op y; }, #a " " #op " " #b); \
      !cohort_check_failure_) [[likely]]                                                  \
    ;                                                                                    \
  else                                                                                   \
    ::cohort::detail::Raise<::cohort::Kind>() &                                          \
        ::cohort::detail::Message(__FILE__, __LINE__, std::move(*cohort_check_failure_))

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
