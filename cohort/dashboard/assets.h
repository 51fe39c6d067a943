// The page and Chart.js, embedded in the library at build time (page.html
// of this folder; Debian's libjs-chart.js, chart.min.js): the dashboard and
// the report need no file at run time and nothing from the network.
#pragma once

#include <string>
#include <string_view>

namespace cohort::dashboard {

// page.html as written: placeholders <!--COHORT_CHART_JS--> in its head and
// <!--COHORT_STATUS--> before its script.
std::string_view page_template();
// Chart.js (3.x), minified.
std::string_view chart_js();
// The Chart.js version embedded ("3.9.1").
std::string_view chart_js_version();

// The page as the server sends it: Chart.js from the server (chart.min.js).
std::string served_page();
// The page as the report writes it: Chart.js and `status_json` inline, no
// polling (report.h).
std::string inlined_page(std::string_view status_json);

}  // namespace cohort::dashboard
