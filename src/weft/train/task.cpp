#include "weft/train/task.h"

namespace weft {

std::unique_ptr<Task> make_image_task(const TrainOptions& options, int replica, int replicas, std::FILE* out);
std::unique_ptr<Task> make_language_task(const TrainOptions& options, int replica, int replicas);

std::unique_ptr<Task> make_task(const TrainOptions& options, int replica, int replicas, std::FILE* out) {
  if (is_language_model(options.model)) return make_language_task(options, replica, replicas);
  return make_image_task(options, replica, replicas, out);
}

}  // namespace weft
