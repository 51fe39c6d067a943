#include "cohort/dashboard/assets.h"

#include "cohort/common/check.h"

namespace cohort::dashboard {
namespace {

constexpr std::string_view kChartPlaceholder = "<!--COHORT_CHART_JS-->";
constexpr std::string_view kStatusPlaceholder = "<!--COHORT_STATUS-->";

std::string replace_once(std::string text, std::string_view placeholder, std::string_view with) {
  const size_t at = text.find(placeholder);
  COHORT_CHECK(at != std::string::npos) << "the dashboard's page has no " << placeholder;
  return text.replace(at, placeholder.size(), with);
}

// Text inside <script>: "</" would end the element early (a metric or a
// message could hold "</script>"); "<\/" means the same in JavaScript
// strings and JSON, and "<!--" cannot open a comment state either.
std::string script_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<' && i + 1 < text.size() && (text[i + 1] == '/' || text[i + 1] == '!')) {
      out += "<\\";
      continue;
    }
    out += text[i];
  }
  return out;
}

}  // namespace

std::string served_page() {
  return replace_once(std::string(page_template()), kChartPlaceholder, R"(<script src="chart.min.js"></script>)");
}

std::string inlined_page(std::string_view status_json) {
  std::string page =
      replace_once(std::string(page_template()), kChartPlaceholder, "<script>" + script_safe(chart_js()) + "</script>");
  return replace_once(std::move(page), kStatusPlaceholder,
                      "<script>window.COHORT_STATUS = " + script_safe(status_json) + ";</script>");
}

}  // namespace cohort::dashboard
