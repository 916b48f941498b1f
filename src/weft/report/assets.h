// The files a report page inlines, built into weft (no file is read and nothing is fetched
// when a page is written or opened): Chart.js from Debian's libjs-chart.js, and the page's
// own script and style (src/weft/report/assets/).
#pragma once

#include <string_view>

namespace weft::report {

std::string_view chart_js();
std::string_view report_js();
std::string_view report_css();

}  // namespace weft::report
