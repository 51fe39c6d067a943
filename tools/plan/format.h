// How cohort-plan writes money, durations and sizes for people: the table,
// --explain and the one-line errors all use these, so that one job reads
// the same everywhere ("3.0 d", never "72.0 h" in one place and "3.0 d" in
// another).
#pragma once

#include <string>

namespace cohort::plan {

// `value` by a printf `format` of one double ("%.3f"; 63 characters at most).
std::string printed(const char* format, double value);

// "$7.31" below $100, else whole dollars: "$1234".
std::string money_text(double usd);

// "42.1 s" below 2 minutes, "17.5 min" below 2 hours, "5.2 h" below 3
// days, else "3.0 d".
std::string duration_text(double seconds);

// "1.50 GiB", "12.0 MiB", "512 KiB" (binary units).
std::string bytes_text(double bytes);

}  // namespace cohort::plan
