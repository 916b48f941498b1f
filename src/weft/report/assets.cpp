#include "weft/report/assets.h"

// The build passes the files' paths (CMakeLists.txt: WEFT_CHARTJS_FILE, WEFT_REPORT_ASSETS);
// the assembler copies their bytes into the read-only data, each followed by its end label.
#define WEFT_STR2(x) #x
#define WEFT_STR(x) WEFT_STR2(x)
#define WEFT_EMBED(name, file)                                      \
  __asm__(".section .rodata\n"                                      \
          ".global weft_asset_" #name "\n"                          \
          "weft_asset_" #name ":\n"                                 \
          ".incbin \"" file "\"\n"                                  \
          ".global weft_asset_" #name "_end\n"                      \
          "weft_asset_" #name "_end:\n"                             \
          ".byte 0\n"                                               \
          ".previous\n");                                           \
  extern "C" const char weft_asset_##name[];                        \
  extern "C" const char weft_asset_##name##_end[];

WEFT_EMBED(chart_js, WEFT_STR(WEFT_CHARTJS_FILE))
WEFT_EMBED(report_js, WEFT_STR(WEFT_REPORT_ASSETS) "/report.js")
WEFT_EMBED(report_css, WEFT_STR(WEFT_REPORT_ASSETS) "/report.css")

namespace weft::report {

std::string_view chart_js() { return {weft_asset_chart_js, static_cast<std::size_t>(weft_asset_chart_js_end - weft_asset_chart_js)}; }
std::string_view report_js() { return {weft_asset_report_js, static_cast<std::size_t>(weft_asset_report_js_end - weft_asset_report_js)}; }
std::string_view report_css() { return {weft_asset_report_css, static_cast<std::size_t>(weft_asset_report_css_end - weft_asset_report_css)}; }

}  // namespace weft::report
