#include "weft/parallel/spans.h"

namespace weft::parallel {

namespace {
thread_local std::vector<Span>* sink = nullptr;
}  // namespace

SpanRecorder::SpanRecorder(std::vector<Span>& s) : previous_(sink) { sink = &s; }
SpanRecorder::~SpanRecorder() { sink = previous_; }

bool recording_spans() { return sink != nullptr; }

void record_span(std::string name, const char* category, int row, std::chrono::steady_clock::time_point start,
                 std::chrono::steady_clock::time_point end) {
  if (sink) sink->push_back({std::move(name), category, row, start, end});
}

}  // namespace weft::parallel
