// Arithmetic on numbers held as their natural logarithms (zero is -inf), and
// the special functions the accountants need in that form. Everything is
// float64 and accurate far past where the plain functions underflow.
#pragma once

namespace cohort::privacy {

// log(exp(a) + exp(b)).
double log_add(double a, double b);

// log(exp(a) - exp(b)); requires a >= b (equal gives -inf).
double log_sub(double a, double b);

// log(erfc(x)) for any x, including x where erfc(x) underflows (x > 26).
double log_erfc(double x);

// log|binom(n, k)| for real n and integer-valued k >= 0, with the sign of
// binom(n, k) (generalised binomial: n(n-1)...(n-k+1)/k!). For n a
// non-negative integer and k > n the coefficient is zero: log_abs is -inf.
struct SignedLog {
  double log_abs;
  int sign;  // +1 or -1
};
SignedLog log_binomial(double n, double k);

}  // namespace cohort::privacy
