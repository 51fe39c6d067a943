#include "cohort/torch/fit/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "cohort/common/check.h"

namespace cohort {

ProgressStyle parse_progress_style(const std::string& text, std::FILE* stream) {
  if (text == "bar") return ProgressStyle::bar;
  if (text == "lines") return ProgressStyle::lines;
  if (text == "none") return ProgressStyle::none;
  COHORT_CHECK_AS(ConfigError, text == "auto") << "unknown progress style '" << text << "'";
  return ::isatty(::fileno(stream)) ? ProgressStyle::bar : ProgressStyle::lines;
}

std::string Progress::format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(s / 3600), (long long)(s / 60 % 60));
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%llds", (long long)s);
  return buf;
}

Progress::Progress(std::FILE* out, ProgressStyle style, std::string label, int64_t total_steps,
                   int64_t samples_per_step)
    : out_(out), style_(style), label_(std::move(label)), total_(std::max<int64_t>(1, total_steps)),
      samples_per_step_(samples_per_step), start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void Progress::update(int64_t done, double loss) {
  if (first_ < 0) {
    first_ = done - 1;
    next_line_ = first_;
  }
  last_done_ = done;
  last_loss_ = loss;
  const auto now = std::chrono::steady_clock::now();
  if (style_ == ProgressStyle::bar) {
    // At most ten redraws a second: a terminal is slow next to a training step.
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    draw(done, loss, done == total_);
    line_ended_ = done == total_;
  } else if (style_ == ProgressStyle::lines) {
    const int64_t tenth = std::max<int64_t>(1, total_ / 10);
    if (done >= next_line_ + tenth || done == total_) {
      next_line_ = done;
      draw(done, loss, false);
    }
  }
}

void Progress::draw(int64_t done, double loss, bool final) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double steps = double(done - first_);
  const double rate = elapsed > 0 ? steps * double(samples_per_step_) / elapsed : 0;
  const double eta = steps > 0 ? elapsed / steps * double(total_ - done) : NAN;
  if (style_ == ProgressStyle::bar) {
    constexpr int kWidth = 24;
    const int filled = int(double(kWidth) * double(done) / double(total_));
    std::string bar(size_t(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r%s [%s] %lld/%lld  loss %.4f  %.0f samples/s  ETA %s\x1b[K", label_.c_str(), bar.c_str(),
                 (long long)done, (long long)total_, loss, rate, format_duration(eta).c_str());
    if (final) std::fputc('\n', out_);
  } else {
    std::fprintf(out_, "%s step %lld/%lld (%3.0f%%)  loss %.4f  %.0f samples/s  ETA %s\n", label_.c_str(),
                 (long long)done, (long long)total_, 100.0 * double(done) / double(total_), loss, rate,
                 format_duration(eta).c_str());
  }
  std::fflush(out_);
}

void Progress::finish() {
  if (style_ == ProgressStyle::bar && last_done_ > 0 && !line_ended_) draw(last_done_, last_loss_, true);
}

}  // namespace cohort
