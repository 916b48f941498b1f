// The report layer without a browser: decimation, distributions, the CSV and metrics readers
// and their refusals, the page's escaping, the plan and timeline sections.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../test_support.h"
#include "weft/report/csv.h"
#include "weft/report/page.h"
#include "weft/report/plan.h"
#include "weft/report/report.h"
#include "weft/report/series.h"
#include "weft/report/timeline.h"
#include "weft/report/training.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

using namespace weft;
using namespace weft::report;
using nlohmann::json;

namespace {
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(Decimate, KeepsEveryPointOfAShortSeries) {
  std::vector<double> y = {3, 1, 4, 1, 5};
  EXPECT_EQ(decimate(y, 10), (std::vector<std::size_t>{0, 1, 2, 3, 4}));
}

TEST(Decimate, KeepsExtremesAndEdgesOfALongSeries) {
  std::vector<double> y(100000);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = std::sin(static_cast<double>(i) * 0.001);
  y[31337] = 50;   // a spike
  y[77777] = -50;  // a dip
  const auto keep = decimate(y, 400);
  EXPECT_LE(keep.size(), 400u);
  EXPECT_GE(keep.size(), 200u);  // at least each bucket's first and last
  EXPECT_TRUE(std::is_sorted(keep.begin(), keep.end()));
  EXPECT_EQ(std::adjacent_find(keep.begin(), keep.end()), keep.end());
  EXPECT_EQ(keep.front(), 0u);
  EXPECT_EQ(keep.back(), y.size() - 1);
  EXPECT_NE(std::find(keep.begin(), keep.end(), 31337u), keep.end());
  EXPECT_NE(std::find(keep.begin(), keep.end(), 77777u), keep.end());
}

TEST(Cdf, OnePointPerValueAtItsLastRank) {
  const Curve c = cdf({3, 1, 2, 2}, 100);
  EXPECT_EQ(c.x, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(c.y, (std::vector<double>{0.25, 0.75, 1.0}));
  std::vector<double> many(10000);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<double>(i);
  const Curve d = cdf(many, 100);
  EXPECT_LE(d.x.size(), 100u);
  EXPECT_EQ(d.x.back(), 9999);
  EXPECT_EQ(d.y.back(), 1.0);
}

TEST(Csv, ReadsColumnsAndRefusesMalformedFiles) {
  CsvTable t("time_us,port,bytes\n1.5,a->b,100\n2.5,b->c,\n", "queues.csv");
  ASSERT_EQ(t.rows(), 2u);
  EXPECT_EQ(t.number(0, t.column("bytes")), 100);
  EXPECT_EQ(t.text(1, t.column("port")), "b->c");
  EXPECT_EQ(t.number_or(1, t.column("bytes"), -1), -1);
  EXPECT_NE(error_of([&] { t.column("queue"); }).find("queues.csv: no column 'queue'"), std::string::npos);
  EXPECT_NE(error_of([&] { t.number(0, t.column("port")); }).find("'a->b' is not a number"), std::string::npos);
  EXPECT_NE(error_of([] { CsvTable("a,b\n1,2,3\n", "x.csv"); }).find("x.csv: line 2 has 3 fields"), std::string::npos);
  EXPECT_NE(error_of([] { CsvTable("", "empty.csv"); }).find("empty.csv: empty"), std::string::npos);
}

TEST(Metrics, LaterRecordsOfAStepWinAndRankFilesAreRead) {
  weft::testing::TempDir dir;
  const std::string path = dir.path() + "/run.metrics.jsonl";
  write_file_atomic(path,
                    R"({"kind":"run","model":"mlp","unit":"samples"})"
                    "\n"
                    R"({"kind":"step","step":1,"loss":2.0,"samples_per_second":10})"
                    "\n"
                    R"({"kind":"step","step":2,"loss":1.5,"samples_per_second":10})"
                    "\n"
                    R"({"kind":"run","model":"mlp","unit":"samples","resumed_from":1})"
                    "\n"
                    R"({"kind":"step","step":2,"loss":1.25,"samples_per_second":12})"
                    "\n");
  write_file_atomic(dir.path() + "/run.metrics-rank1.jsonl", R"({"kind":"step","step":1,"loss":2.5})" "\n");
  ASSERT_TRUE(is_metrics_file(path));
  const MetricsRun m = read_metrics(path);
  EXPECT_EQ(m.name, "run");
  EXPECT_EQ(m.run.value("resumed_from", 0), 1);
  ASSERT_EQ(m.steps().size(), 2u);
  EXPECT_EQ(m.steps()[1]["loss"].get<double>(), 1.25);
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[1].first, 1);
  const json sections = training_sections({m}, 2000);
  const json& loss = sections[1]["charts"][0];
  EXPECT_EQ(loss["id"], "loss");
  EXPECT_EQ(loss["series"][0]["y"], json({2.0, 1.25}));
}

TEST(Metrics, RefusesLinesThatAreNotRecords) {
  weft::testing::TempDir dir;
  const std::string path = dir.path() + "/bad.jsonl";
  write_file_atomic(path, "{\"kind\":\"step\",\"step\":1,\"loss\":1}\nnot json\n");
  EXPECT_NE(error_of([&] { read_metrics(path); }).find("bad.jsonl: line 2: not a JSON object"), std::string::npos);
  write_file_atomic(path, "{\"kind\":\"step\",\"step\":-3,\"loss\":1}\n");
  EXPECT_NE(error_of([&] { read_metrics(path); }).find("line 1: a step record without a step number"), std::string::npos);
  write_file_atomic(path, "{\"kind\":\"run\"}\n");
  EXPECT_NE(error_of([&] { read_metrics(path); }).find("no step records"), std::string::npos);
}

TEST(Page, NamesFromFilesCannotEndTheScript) {
  Page p;
  p.title = "a <b> & c";
  p.sections = json::array({{{"title", "x"}, {"notes", {"</script><script>alert(1)</script>"}}}});
  const std::string html = render_page(p);
  EXPECT_EQ(html.find("</script><script>alert"), std::string::npos);
  EXPECT_NE(html.find("<\\/script><script>alert(1)<\\/script>"), std::string::npos);
  EXPECT_NE(html.find("<title>a &lt;b&gt; &amp; c</title>"), std::string::npos);
  EXPECT_NE(html.find("Chart.js v3"), std::string::npos);  // inlined, nothing fetched
  EXPECT_EQ(html.find("<script src"), std::string::npos);
}

TEST(PlanSection, MemoryBarsAgainstCapacityAndRefusals) {
  const json plan = {{"model", "m"},
                     {"gpu", {{"name", "g"}, {"memory_bytes", 80e9}}},
                     {"layout", {{"tp", 8}, {"pp", 2}, {"dp", 4}, {"gpus", 64}}},
                     {"memory_per_gpu", {{"weights", 1e9}, {"gradients", 2e9}, {"optimizer", 3e9}, {"activations", 4e9},
                                         {"total", 10e9}, {"fits", true}}}};
  ASSERT_TRUE(is_plan(plan));
  const json s = plan_sections(plan, "p.json");
  const json& bars = s[0]["charts"][0];
  EXPECT_EQ(bars["limit"]["value"], 80);
  EXPECT_EQ(bars["categories"], json({"tp8 pp2 dp4"}));
  EXPECT_EQ(bars["series"].size(), 4u);  // no KV cache in a training plan
  EXPECT_EQ(bars["series"][2]["values"], json({3.0}));
  json broken = plan;
  broken["gpu"].erase("memory_bytes");
  EXPECT_NE(error_of([&] { plan_sections(broken, "p.json"); }).find("p.json: no number 'memory_bytes'"), std::string::npos);
}

TEST(TimelineSection, LanesPerRankAndRowKindsByName) {
  weft::testing::TempDir dir;
  const std::string path = dir.path() + "/t.json";
  write_file_atomic(path, R"({"traceEvents":[
    {"ph":"M","name":"thread_name","pid":0,"tid":0,"args":{"name":"compute"}},
    {"ph":"X","name":"forward 0","pid":0,"tid":0,"ts":1000,"dur":10},
    {"ph":"X","name":"forward 1","pid":0,"tid":0,"ts":1020,"dur":10},
    {"ph":"X","name":"send activation 0 to stage 1","pid":0,"tid":1,"ts":1010,"dur":5},
    {"ph":"X","name":"backward 0","pid":1,"tid":0,"ts":1015,"dur":20}]})");
  ASSERT_TRUE(is_trace_file(path));
  const json s = timeline_section({path}, 1000);
  const json& c = s["charts"][0];
  EXPECT_EQ(c["lanes"], json({"rank 0 compute", "rank 0 row 1", "rank 1 row 0"}));
  EXPECT_EQ(c["kinds"].size(), 3u);
  EXPECT_EQ(c["kinds"][1]["name"], "send activation");
  EXPECT_EQ(c["spans"].size(), 4u);
  EXPECT_DOUBLE_EQ(c["spans"][0][3].get<double>(), 0.01);  // ms from the first event
  write_file_atomic(path, R"({"traceEvents":[]})");
  EXPECT_NE(error_of([&] { timeline_section({path}, 1000); }).find("no timed events"), std::string::npos);
}

// weft timeline merge: every rank's events in one trace; a rank given twice, ranks of two
// runs (one process in two files) and events the trace format does not have are refused,
// and the output replaces only a trace.
TEST(MergeTraces, OneTrackPerRankAndBadTracesRefused) {
  weft::testing::TempDir dir;
  const std::string r0 = dir.path() + "/t-rank0.json", r1 = dir.path() + "/t-rank1.json", out = dir.path() + "/all.json";
  write_file_atomic(r0, R"({"traceEvents":[{"ph":"M","name":"process_name","pid":0,"args":{"name":"rank 0"}},
    {"ph":"X","name":"forward 0","pid":0,"tid":0,"ts":1000,"dur":10}]})");
  write_file_atomic(r1, R"({"traceEvents":[{"ph":"X","name":"forward 0","pid":1,"tid":0,"ts":1002,"dur":12}]})");
  merge_traces({r0, r1}, out);
  const json merged = json::parse(read_file(out));
  ASSERT_EQ(merged["traceEvents"].size(), 3u);
  EXPECT_EQ(merged["traceEvents"][2]["pid"], 1);
  EXPECT_EQ(timeline_section({out}, 1000)["charts"][0]["lanes"], json({"rank 0 row 0", "rank 1 row 0"}));
  EXPECT_EQ(error_of([&] { merge_traces({r0, r0}, out); }), r0 + " is given twice");
  // The merged trace holds rank 1's events: with rank 1's file again, rank 1 twice.
  EXPECT_NE(error_of([&] { merge_traces({out, r1}, out); }).find("all.json and " + r1 + " both hold events of process 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { timeline_section({r1, out}, 1000); }).find("both hold events of process 1"), std::string::npos);
  const std::string bad = dir.path() + "/bad.json";
  const std::pair<const char*, const char*> cases[] = {
      {"1", "is not an object"},
      {R"({"ts":1})", "has no phase"},
      {R"({"ph":"X","ts":1,"pid":0})", R"(complete event ("X") without "dur")"},
      {R"({"ph":"X","ts":1,"dur":-1})", R"("dur" that is not a finite number of zero or more)"},
      {R"({"ph":"B","ts":"soon"})", R"("ts" that is not a finite number)"},
      {R"({"ph":"M","pid":1e300})", "pid that is not a whole number"},
      {R"({"ph":"M","tid":4294967296})", "tid that is not a whole number"},
      {R"({"ph":"i","ts":1,"name":5})", "name that is not a string"}};
  for (const auto& [event, why] : cases) {
    write_file_atomic(bad, std::string(R"({"traceEvents":[{"ph":"i","ts":0},)") + event + "]}");
    const std::string e = error_of([&] { merge_traces({bad}, out); });
    EXPECT_EQ(e.rfind(bad + ": event 1 of traceEvents ", 0), 0u) << e;
    EXPECT_NE(e.find(why), std::string::npos) << e;
  }
  EXPECT_EQ(json::parse(read_file(out))["traceEvents"].size(), 3u);  // no refused merge wrote
  const std::string model = dir.path() + "/model.safetensors";
  write_file_atomic(model, "weights");
  EXPECT_NE(error_of([&] { merge_traces({r0}, model); }).find("exists and is not a timeline"), std::string::npos);
  EXPECT_EQ(read_file(model), "weights");
}

TEST(Report, RefusesWhatItCannotDraw) {
  weft::testing::TempDir dir;
  EXPECT_NE(error_of([&] { make_report({dir.path() + "/missing"}, {}); }).find("missing: no such file or folder"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_report({dir.path()}, {}); }).find("neither a weft sim --out folder"), std::string::npos);
  write_file_atomic(dir.path() + "/other.json", "{\"hello\": 1}");
  EXPECT_NE(error_of([&] { make_report({dir.path() + "/other.json"}, {}); }).find("other.json: not a metrics file"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_report({}, {}); }).find("at least one path"), std::string::npos);
  // Fields of the wrong type: named with the file, never an unexplained exception.
  write_file_atomic(dir.path() + "/t.json", R"({"traceEvents":[{"ph":"X","pid":"a","tid":0,"ts":1,"dur":2}]})");
  EXPECT_NE(error_of([&] { make_report({dir.path() + "/t.json"}, {}); }).find("t.json: event 0 of traceEvents has a pid that"),
            std::string::npos);
  write_file_atomic(dir.path() + "/s.json", R"({"kind":"sweep","gpu":{"memory_bytes":1e9},"layouts":[{"layout":5}]})");
  EXPECT_NE(error_of([&] { make_report({dir.path() + "/s.json"}, {}); }).find("s.json: not as weft writes it"),
            std::string::npos);
}
