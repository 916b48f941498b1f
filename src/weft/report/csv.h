// The CSV files weft sim writes (docs/simulator.md): a header row, then rows of the same
// width, fields without quotes or commas. A file that is not that is refused with its name
// and line.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace weft::report {

class CsvTable {
 public:
  // Throws DataError naming `name` and the line.
  CsvTable(const std::string& text, std::string name);
  std::size_t rows() const { return rows_.size(); }
  // The index of the column called `column`; throws DataError when the file has none.
  std::size_t column(const std::string& column) const;
  const std::string& text(std::size_t row, std::size_t col) const { return rows_[row][col]; }
  // The field as a number; throws DataError naming the file, line and column.
  double number(std::size_t row, std::size_t col) const;
  // The field as a number, or `empty` when the field is empty.
  double number_or(std::size_t row, std::size_t col, double empty) const;

 private:
  std::string name_;
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace weft::report
