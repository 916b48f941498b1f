#include "weft/train/task.h"

#include "weft/util/parse.h"

#include <cmath>

#include "weft/util/error.h"

namespace weft {

void Task::set_speeds(std::vector<double> speeds) {
  if (speeds.size() != speeds_.size())
    throw ConfigError("batch shares: " + std::to_string(speeds.size()) + " given for " + std::to_string(speeds_.size()) +
                      " data-parallel replicas");
  for (double s : speeds)
    if (!std::isfinite(s) || s <= 0) throw ConfigError("batch shares: each replica's share must be a positive number");
  speeds_ = std::move(speeds);
}

int Task::layer_of(const std::string& parameter) const {
  const auto dot = parameter.find('.');
  const auto n = dot == std::string::npos ? std::nullopt : parse_integer(parameter.substr(0, dot));
  return n && *n >= 0 && *n < (1 << 30) ? static_cast<int>(*n) : -1;
}

std::unique_ptr<Task> make_image_task(const TrainOptions& options, int replica, int replicas, std::FILE* out);
std::unique_ptr<Task> make_language_task(const TrainOptions& options, int replica, int replicas);

std::unique_ptr<Task> make_task(const TrainOptions& options, int replica, int replicas, std::FILE* out) {
  if (is_language_model(options.model)) return make_language_task(options, replica, replicas);
  return make_image_task(options, replica, replicas, out);
}

}  // namespace weft
