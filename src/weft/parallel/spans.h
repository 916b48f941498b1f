// Spans of what a training step did, for timelines (train/timeline.h). While a
// SpanRecorder is alive on a thread, the strategies' operations there add their spans to it
// (a pipeline's forward and backward per micro-batch and its sends and receives, tensor
// parallelism's collectives, DDP's buckets); with none alive, recording costs a branch.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace weft::parallel {

// A name, a category ("compute", "comm", "data"), a row (0: the step's own work, 1:
// communication beside it), and when.
struct Span {
  std::string name, category;
  int row = 0;
  std::chrono::steady_clock::time_point start, end;
};

class SpanRecorder {
 public:
  explicit SpanRecorder(std::vector<Span>& sink);
  ~SpanRecorder();
  SpanRecorder(const SpanRecorder&) = delete;
  SpanRecorder& operator=(const SpanRecorder&) = delete;

 private:
  std::vector<Span>* previous_;
};

bool recording_spans();
void record_span(std::string name, const char* category, int row, std::chrono::steady_clock::time_point start,
                 std::chrono::steady_clock::time_point end = std::chrono::steady_clock::now());

}  // namespace weft::parallel
