// The server's metrics in the Prometheus text format (version 0.0.4): counters, gauges and
// histograms, each with optional labels, safe to update from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace weft::serve {

class Metrics {
 public:
  // Declares a family before use (its help line and type); buckets for histograms.
  void counter(const std::string& name, const std::string& help);
  void gauge(const std::string& name, const std::string& help);
  void histogram(const std::string& name, const std::string& help, std::vector<double> buckets);

  // labels: "" or `key="value",...` as they appear between the braces.
  void add(const std::string& name, double value, const std::string& labels = "");
  void set(const std::string& name, double value, const std::string& labels = "");
  void observe(const std::string& name, double value, const std::string& labels = "");
  double value(const std::string& name, const std::string& labels = "") const;  // counters and gauges

  std::string text() const;  // the exposition of every family

 private:
  struct Series {
    double value = 0;                   // counter or gauge
    std::vector<std::uint64_t> counts;  // histogram: per bucket (not cumulative)
    double sum = 0;
    std::uint64_t count = 0;
  };
  struct Family {
    std::string help, type;
    std::vector<double> buckets;
    std::map<std::string, Series> series;  // by labels
  };
  Family& family(const std::string& name);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

}  // namespace weft::serve
