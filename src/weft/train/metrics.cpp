#include "weft/train/metrics.h"

#include <filesystem>

#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft {

MetricsLog::MetricsLog(const std::vector<std::string>& paths, bool append) {
  for (const std::string& path : paths) {
    const std::string folder = std::filesystem::path(path).parent_path().string();
    if (!folder.empty()) make_directories(folder);
    std::FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
    if (!f) throw ConfigError("cannot write the metrics file " + path);
    files_.emplace_back(f, &std::fclose);
  }
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  for (auto& f : files_) {
    std::fwrite(line.data(), 1, line.size(), f.get());
    std::fflush(f.get());
  }
}

}  // namespace weft
