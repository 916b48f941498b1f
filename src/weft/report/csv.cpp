#include "weft/report/csv.h"

#include <fmt/format.h>

#include "weft/util/error.h"
#include "weft/util/parse.h"

namespace weft::report {

namespace {
std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    out.push_back(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}
}  // namespace

CsvTable::CsvTable(const std::string& text, std::string name) : name_(std::move(name)) {
  std::size_t start = 0, line_no = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(start, nl - start);
    start = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> fields = split_fields(line);
    if (header_.empty()) {
      header_ = std::move(fields);
    } else if (fields.size() != header_.size()) {
      throw DataError(fmt::format("{}: line {} has {} fields, the header {}", name_, line_no, fields.size(), header_.size()));
    } else {
      rows_.push_back(std::move(fields));
    }
  }
  if (header_.empty()) throw DataError(name_ + ": empty (no header row)");
}

std::size_t CsvTable::column(const std::string& column) const {
  for (std::size_t i = 0; i < header_.size(); ++i)
    if (header_[i] == column) return i;
  throw DataError(fmt::format("{}: no column '{}' (not a file written by weft sim?)", name_, column));
}

double CsvTable::number(std::size_t row, std::size_t col) const {
  std::optional<double> v = parse_number(rows_[row][col]);
  if (!v) {
    throw DataError(fmt::format("{}: line {}, column '{}': '{}' is not a number", name_, row + 2, header_[col],
                                rows_[row][col]));
  }
  return *v;
}

double CsvTable::number_or(std::size_t row, std::size_t col, double empty) const {
  return rows_[row][col].empty() ? empty : number(row, col);
}

}  // namespace weft::report
