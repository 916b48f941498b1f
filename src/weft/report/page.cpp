#include "weft/report/page.h"

#include "weft/report/assets.h"
#include "weft/report/series.h"

namespace weft::report {

namespace {
// Text placed inside a <script> element must not contain "</" (it would end the element).
std::string script_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') out += "\\";
  }
  return out;
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}
}  // namespace

std::string render_page(const Page& page) {
  const nlohmann::json doc = {{"title", page.title}, {"subtitle", page.subtitle}, {"footer", page.footer},
                              {"sections", page.sections}};
  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += "<title>" + html_escape(page.title) + "</title>\n<style>\n";
  html += report_css();
  html += "</style>\n</head>\n<body>\n<main id=\"weft-report\"></main>\n";
  html += "<script id=\"weft-data\" type=\"application/json\">";
  // Invalid UTF-8 from a file's names is replaced, never refused.
  html += script_safe(doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  html += "</script>\n<script>\n";
  html += chart_js();  // Chart.js's own file holds no "</script"
  html += "\n</script>\n<script>\n";
  html += report_js();
  html += "\n</script>\n</body>\n</html>\n";
  return html;
}

nlohmann::json line_series(const std::string& name, const std::vector<double>& x, const std::vector<double>& y,
                           std::size_t max_points) {
  const std::vector<std::size_t> keep = decimate(y, max_points);
  return {{"name", name}, {"x", pick(x, keep)}, {"y", pick(y, keep)}};
}

}  // namespace weft::report
