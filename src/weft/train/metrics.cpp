#include "weft/train/metrics.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft {

MetricsLog::MetricsLog(const std::vector<std::string>& paths, bool append) {
  for (const std::string& path : paths) {
    const std::string folder = std::filesystem::path(path).parent_path().string();
    if (!folder.empty()) make_directories(folder);
    std::FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
    if (!f) throw ConfigError("cannot write the metrics file " + path + ": " + std::strerror(errno));
    files_.emplace_back(f, &std::fclose);
    paths_.push_back(path);
  }
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  for (std::size_t i = 0; i < files_.size(); ++i) {
    std::FILE* f = files_[i].get();
    if (std::fwrite(line.data(), 1, line.size(), f) != line.size() || std::fflush(f) != 0)
      throw Error("cannot write the metrics file " + paths_[i] + ": " + std::strerror(errno));
  }
}

}  // namespace weft
