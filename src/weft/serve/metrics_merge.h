// Sums of Prometheus text expositions (version 0.0.4): how the front end of several replicas
// shows their metrics as one server's. Each sample (its name and labels) is summed over the
// expositions; each family keeps its HELP and TYPE lines once. A replica that stops leaves its
// counters and histograms in a retired total, so that what the front end shows never goes
// back (a counter's contract); its gauges leave with it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace weft::serve {

struct Exposition {
  std::map<std::string, std::string> families;  // name -> its type (counter, gauge, histogram, ...)
  std::map<std::string, std::string> help;      // name -> its help text
  std::map<std::string, double> samples;        // "name{labels}" -> value
  std::vector<std::string> order;               // the samples' keys as they first came (buckets in order)
};

// The families and samples of `text`; a line that is not a comment, a sample of a declared
// family or a number is skipped.
Exposition parse_exposition(const std::string& text);
// The family a sample's name belongs to (a histogram's _bucket, _sum and _count its own), or "".
std::string family_of(const Exposition& e, const std::string& sample_name);
// Adds the samples of `part` whose family `keep` takes into `total`; with `monotonic_only`,
// only counters' and histograms' (what a stopped replica leaves behind).
void add_exposition(Exposition& total, const Exposition& part, const std::function<bool(const std::string&)>& keep,
                    bool monotonic_only = false);
// The text of `e`, family by family.
std::string exposition_text(const Exposition& e);

}  // namespace weft::serve
