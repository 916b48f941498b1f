// The front end of data-parallel and elastic serving: one HTTP server in front of replica
// processes (replicas.h). It checks the token and the limits, gives every completion a seed
// (so that a retry on another replica yields the same tokens), routes each request to the
// replica with the least outstanding requests, and retries a request whose replica died on
// another one; a stream that was cut resumes there, each of its choices skipping the events
// already sent. No accepted request is lost or answered twice. Its /metrics adds its
// replicas' (scraped each second).
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/comm/auth.h"
#include "weft/serve/api.h"
#include "weft/serve/http_base.h"
#include "weft/serve/metrics_merge.h"
#include "weft/serve/model_parallel.h"
#include "weft/serve/replicas.h"
#include "weft/util/error.h"

namespace weft::serve {

namespace {

using nlohmann::json;
constexpr int kAttempts = 5;
constexpr double kWaitForReplicaS = 30;

// A server-sent event of a stream: the choice it belongs to (-1: none, as the usage chunk and
// [DONE]), and whether it carries a piece of text.
struct StreamEvent {
  std::int64_t choice = -1;
  bool text = false;
};
StreamEvent read_event(const std::string& event) {
  if (event.rfind("data: {", 0) != 0) return {};
  json j = json::parse(event.substr(6), nullptr, false);
  if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty() ||
      !j["choices"][0].is_object())
    return {};
  const json& choice = j["choices"][0];
  StreamEvent e;
  e.choice = choice.contains("index") && choice["index"].is_number_integer() ? choice["index"].get<std::int64_t>() : 0;
  e.text = !choice.value("text", std::string()).empty() ||  // a completion's text, or a chat completion's
           (choice.contains("delta") && choice["delta"].is_object() && !choice["delta"].value("content", std::string()).empty());
  return e;
}

// Keep-alive connections to the replicas, by port: a request takes an idle one (or opens one)
// and gives it back once its answer came whole, so that requests do not each pay a TCP
// connection (the front end's connect and teardown and the replica's accept were 15-18% of
// the front end's processor time for one-token completions). A connection the replica closed
// meanwhile (its idle timeout, its exit) is opened again at its next use; the ports of
// replicas that are gone are forgotten (keep_only). At most kIdlePerReplica wait per port.
class ReplicaConnections {
 public:
  std::unique_ptr<httplib::Client> take(int port) {
    {
      std::lock_guard lock(mu_);
      auto it = idle_.find(port);
      if (it != idle_.end() && !it->second.empty()) {
        std::unique_ptr<httplib::Client> c = std::move(it->second.back());
        it->second.pop_back();
        return c;
      }
    }
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);  // (a request's header and body are two writes: with Nagle's
                               // algorithm the body waited for the replica's delayed ACK,
                               // 40 ms, on a reused connection)
    c->set_read_timeout(600);
    return c;
  }
  // After a whole answer: kept if its connection is still open (a cut or refused one was
  // closed by the client library).
  void give_back(int port, std::unique_ptr<httplib::Client> c) {
    if (!c->is_socket_open()) return;
    std::lock_guard lock(mu_);
    auto& idle = idle_[port];
    if (idle.size() < kIdlePerReplica) idle.push_back(std::move(c));
  }
  void keep_only(const std::set<int>& ports) {
    std::lock_guard lock(mu_);
    for (auto it = idle_.begin(); it != idle_.end();) it = ports.count(it->first) ? std::next(it) : idle_.erase(it);
  }

 private:
  static constexpr std::size_t kIdlePerReplica = 64;
  std::mutex mu_;
  std::map<int, std::vector<std::unique_ptr<httplib::Client>>> idle_;
};

// One streamed completion relayed from a replica: the relay thread fills it, the client's
// connection drains it.
struct Relay {
  std::mutex mu;
  std::condition_variable cv;
  int status = 0;  // the replica's status (0: not known yet)
  std::string error_body;
  std::deque<std::string> events;
  std::string last_text_event;  // (its id, created and model name the abort chunk at a stop)
  bool done = false, cancelled = false, finished = false;  // finished: the replica's [DONE] relayed
};

// The last chunk of a stream the front end ends itself at a stop: the last piece's chunk
// with no text and finish_reason "abort".
std::string abort_event(const std::string& last_text_event, bool chat) {
  json j = json::parse(last_text_event.size() > 6 ? last_text_event.substr(6) : std::string(), nullptr, false);
  const std::string id = j.is_object() ? j.value("id", std::string("cmpl-aborted")) : "cmpl-aborted";
  const std::int64_t created = j.is_object() ? j.value("created", std::int64_t{0}) : std::int64_t{0};
  const std::string model = j.is_object() ? j.value("model", std::string()) : std::string();
  const json chunk = chat ? chat_chunk(id, created, model, "", "abort", false) : completion_chunk(id, created, model, "", "abort");
  return "data: " + chunk.dump() + "\n\n";
}

class FrontEnd : private MetricsHolder, public HttpBase {
 public:
  FrontEnd(const ServeOptions& o, std::FILE* log) : HttpBase(o, owned_metrics_), log_(log) {
    metrics_.counter("weft_retries_total", "requests sent again to another replica after theirs failed");
    ReplicaOptions r;
    r.min = o.replicas_min;
    r.max = o.replicas_max;
    r.token = token_;
    r.folder = folder_;
    r.scale_up_load = o.scale_up_load;
    r.scale_down_after_s = o.scale_down_after_s;
    r.command = {"serve", o.model, "--max-batch", std::to_string(o.batch.max_batch), "--max-body",
                 std::to_string(o.max_body + 1024),  // (+ the seed it adds)
                 "--max-concurrency", std::to_string(o.max_concurrency)};
    if (const auto wait = given_max_wait_ms(o)) r.command.insert(r.command.end(), {"--max-wait-ms", fmt::format("{}", *wait)});
    // The flags of one kind of model go on when given or set (a replica refuses those its model
    // does not take, and defaults the rest as the front end would).
    const ServeOptions initial;
    const auto pass = [&](const char* flag, const std::string& value, bool set) {
      if (set || std::find(o.given_flags.begin(), o.given_flags.end(), flag) != o.given_flags.end())
        r.command.insert(r.command.end(), {flag, value});
    };
    pass("--max-prompt-tokens", std::to_string(o.max_prompt_tokens), o.max_prompt_tokens != initial.max_prompt_tokens);
    pass("--max-tokens", std::to_string(o.max_tokens), o.max_tokens != initial.max_tokens);
    pass("--max-prefill-tokens", std::to_string(o.batch.max_prefill_tokens),
         o.batch.max_prefill_tokens != initial.batch.max_prefill_tokens);
    pass("--max-images", std::to_string(o.max_images), o.max_images != initial.max_images);
    pass("--quantize", o.quantize, o.quantize != initial.quantize);
    pass("--kv-cache-dtype", o.kv_cache_dtype, o.kv_cache_dtype != initial.kv_cache_dtype);
    pass("--kv-cache-memory", std::to_string(o.kv_cache_memory.value_or(0)), o.kv_cache_memory.has_value());
    pass("--preemption", o.batch.preempt ? "recompute" : "none", o.batch.preempt);
    pass("--block-size", std::to_string(o.block_size), o.block_size != initial.block_size);
    pass("--request-timeout", fmt::format("{}", o.request_timeout_s), o.request_timeout_s != initial.request_timeout_s);
    // Each replica split over --tp x --pp ranks of its own.
    pass("--tp", std::to_string(o.tp), o.tp != initial.tp);
    pass("--pp", std::to_string(o.pp), o.pp != initial.pp);
    pass("--micro-batches", std::to_string(o.micro_batches), o.micro_batches != initial.micro_batches);
    r.ranks = o.tp * o.pp;
    std::filesystem::create_directories(folder_);
    replicas_ = std::make_unique<ReplicaSet>(r, log, metrics_);
    more_metrics_ = [this] {
      std::lock_guard lock(scrape_mu_);
      return replica_metrics_;
    };
    scraper_ = std::thread([this] { scrape(); });
    http_.Get("/v1/models", [this](const http::Request& req, http::Response& res) { forward(req, res, "/v1/models"); });
    http_.Get("/v1/models/", [this](const http::Request& req, http::Response& res) { forward(req, res, "/v1/models/{id}"); });
    http_.Post("/v1/completions", [this](const http::Request& req, http::Response& res) { completions(req, res); });
    http_.Post("/v1/chat/completions", [this](const http::Request& req, http::Response& res) { completions(req, res); });
    http_.Post("/v1/classify", [this](const http::Request& req, http::Response& res) { forward(req, res, "/v1/classify"); });
  }

  ~FrontEnd() {
    {
      std::lock_guard l(scrape_mu_);
      scraping_ = false;
    }
    scrape_cv_.notify_all();
    scraper_.join();
    std::unique_lock lock(relays_mu_);
    relays_cv_.wait(lock, [&] { return relays_ == 0; });
    lock.unlock();
    replicas_.reset();
    std::filesystem::remove_all(folder_);
  }

  int run() {
    replicas_->wait_ready(120);
    const std::string split =  // each replica's ranks
        o_.tp * o_.pp > 1 ? fmt::format(", each {} ranks: {}", o_.tp * o_.pp, split_name(o_.tp, o_.pp)) : "";
    return listen(log_, fmt::format("{} behind {} replica{} ({}{}), routed by least outstanding requests", o_.model,
                                    o_.replicas_min == o_.replicas_max ? std::to_string(o_.replicas_max)
                                                                       : fmt::format("{}-{}", o_.replicas_min, o_.replicas_max),
                                    o_.replicas_max > 1 ? "s" : "",
                                    o_.replicas_min == o_.replicas_max ? "each bound to its share of the cores"
                                                                       : "elastic",
                                    split));
  }

 private:
  httplib::Headers upstream_headers() const { return {{"Authorization", "Bearer " + token_}}; }

  // Runs `attempt` with a client of a replica, and again with another when it returns false
  // (the request failed there: the replica may have died), up to kAttempts; a replica not
  // tried yet first, else any (a restarted one). False when none could answer.
  template <class Attempt>
  bool on_some_replica(Attempt&& attempt) {
    std::set<int> tried;
    for (int n = 0; n < kAttempts; ++n) {
      auto lease = replicas_->acquire(tried, kWaitForReplicaS);
      if (!lease && !tried.empty()) {
        tried.clear();
        lease = replicas_->acquire(tried, kWaitForReplicaS);
      }
      if (!lease) return false;
      std::unique_ptr<httplib::Client> client = connections_.take(lease->port());
      if (attempt(*client)) {
        connections_.give_back(lease->port(), std::move(client));
        return true;
      }
      replicas_->suspect(lease->slot());
      tried.insert(lease->slot());
      metrics_.add("weft_retries_total", 1);
    }
    return false;
  }

  // A request answered whole (classify, models, completions without stream): sent to a
  // replica, and to another if that one fails.
  void forward(const http::Request& req, http::Response& res, const char* endpoint, const std::string& body_in = "") {
    const auto start = Clock::now();
    const AdmissionPtr admission = admit(endpoint, res, start);
    if (!admission) return;
    const std::string& body = body_in.empty() ? req.body : body_in;
    bool abandoned = false;  // the client left, or the stop's drain is over
    const bool answered = on_some_replica([&](httplib::Client& client) {
      // Stops the replica's request (which then cancels its generation) once its client left.
      std::atomic<bool> replied{false};
      std::thread watch([&] {
        while (!replied.load()) {
          if (req.client_gone() || http_.draining()) {
            abandoned = true;
            client.stop();
            return;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      });
      httplib::Result r = req.method == "GET" ? client.Get(req.path, upstream_headers())
                                              : client.Post(req.path, upstream_headers(), body, "application/json");
      replied = true;
      watch.join();
      if (abandoned) return true;
      if (!r) return false;
      res.status = r->status;
      if (r->has_header("Retry-After")) res.set_header("Retry-After", r->get_header_value("Retry-After"));
      res.set_content(r->body, r->get_header_value("Content-Type"));
      return true;
    });
    if (abandoned) {
      if (req.client_gone()) return count(endpoint, 499, start);
      send_error(res, 503, "the server stopped before the request finished");
      return count(endpoint, 503, start);
    }
    if (answered) {
      count(endpoint, res.status, start);
      return;
    }
    send_error(res, 503, "no replica could answer; retry later");
    count(endpoint, 503, start);
  }

  // A completion or a chat completion (the replica renders its chat template).
  void completions(const http::Request& req, http::Response& res) {
    const char* endpoint = req.path == "/v1/chat/completions" ? "/v1/chat/completions" : "/v1/completions";
    json j = json::parse(req.body, nullptr, false);
    if (!j.is_object()) return forward(req, res, endpoint);  // the replica names the problem
    if (!j.contains("seed") || j["seed"].is_null()) j["seed"] = static_cast<std::int64_t>(fresh_random() & INT64_MAX);
    const std::string body = j.dump();
    auto stream = j.find("stream");
    if (stream == j.end() || !stream->is_boolean() || !stream->get<bool>()) return forward(req, res, endpoint, body);
    const auto start = Clock::now();
    const AdmissionPtr admission = admit(endpoint, res, start);
    if (!admission) return;
    auto relay = std::make_shared<Relay>();
    {
      std::lock_guard lock(relays_mu_);
      ++relays_;
    }
    std::thread([this, relay, body, path = req.path] {
      run_relay(*relay, path, body);
      std::lock_guard lock(relays_mu_);
      --relays_;
      relays_cv_.notify_all();
    }).detach();
    // Wait for the replica's answer: an error is answered whole, a stream relayed.
    std::unique_lock lock(relay->mu);
    relay->cv.wait(lock, [&] { return relay->status != 0 || relay->done; });
    if (relay->status != 200) {
      relay->cv.wait(lock, [&] { return relay->done; });
      if (relay->status == 0) send_error(res, 503, "no replica could answer; retry later");
      else res.status = relay->status, res.set_content(relay->error_body, "application/json");
      count(endpoint, res.status, start);
      return;
    }
    lock.unlock();
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, relay, admission, start, endpoint, chat = std::string(endpoint) == "/v1/chat/completions"](
            size_t, http::DataSink& sink) {
          std::unique_lock l(relay->mu);
          if (sink.draining() && !relay->finished) {
            // The stop's drain is over: what came is sent, then the stream ends whole.
            relay->cancelled = true;
            std::string rest;
            for (std::string& e : relay->events) rest += e;
            relay->events.clear();
            rest += abort_event(relay->last_text_event, chat) + "data: [DONE]\n\n";
            l.unlock();
            if (!sink.write(rest.data(), rest.size())) return false;
            sink.done();
            count(endpoint, 200, start);
            return true;
          }
          relay->cv.wait_for(l, std::chrono::milliseconds(100), [&] { return !relay->events.empty() || relay->done; });
          // What came since the last wake-up goes as one chunk: one hand-over to the event
          // loop and one send for the events a busy replica streamed meanwhile (and again for
          // those that came during the write, before `done` is looked at).
          while (!relay->events.empty()) {
            std::string chunk;
            for (std::string& e : relay->events) chunk += e;
            relay->events.clear();
            l.unlock();
            if (!sink.write(chunk.data(), chunk.size())) return false;
            l.lock();
          }
          if (relay->done) {
            sink.done();
            count(endpoint, 200, start);
            return true;
          }
          return sink.is_writable();
        },
        [relay](bool success) {
          if (success) return;
          std::lock_guard l(relay->mu);
          relay->cancelled = true;  // the client went away: the relay stops, and so does the replica
        });
  }

  // Streams a completion from a replica into the relay; if the replica dies mid-stream, the
  // same request (same seed) goes to another, where each choice's first events (already sent)
  // are skipped. A choice's events are the same on every replica: its own seed gives its
  // tokens, whatever the other choices do; only their interleaving differs.
  void run_relay(Relay& relay, const std::string& path, const std::string& body) {
    std::map<std::int64_t, std::int64_t> sent;  // events relayed, per choice
    on_some_replica([&](httplib::Client& client) {
      httplib::Request up;
      up.method = "POST";
      up.path = path;
      up.headers = upstream_headers();
      up.headers.emplace("Content-Type", "application/json");
      up.body = body;
      int status = 0;
      std::map<std::int64_t, std::int64_t> seen;  // this attempt's events, per choice
      bool finished = false;
      std::string buffer;
      up.response_handler = [&](const httplib::Response& r) {
        status = r.status;
        if (status != 200) return true;
        std::lock_guard l(relay.mu);
        relay.status = 200;
        relay.cv.notify_all();
        return !relay.cancelled;
      };
      up.content_receiver = [&](const char* data, size_t size, std::uint64_t, std::uint64_t) {
        std::lock_guard l(relay.mu);
        if (relay.cancelled) return false;
        if (status != 200) {
          relay.error_body.append(data, size);
          return true;
        }
        buffer.append(data, size);
        for (std::size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
          std::string event = buffer.substr(0, end + 2);
          buffer.erase(0, end + 2);
          const StreamEvent e = read_event(event);
          if (e.choice >= 0) {
            if (++seen[e.choice] <= sent[e.choice]) continue;  // sent before the retry
            ++sent[e.choice];
          }
          if (e.text) relay.last_text_event = event;
          if (event == "data: [DONE]\n\n") finished = relay.finished = true;
          relay.events.push_back(std::move(event));
        }
        relay.cv.notify_all();
        return true;
      };
      httplib::Result r = client.send(up);
      std::lock_guard l(relay.mu);
      if (relay.cancelled) return true;  // nothing more to send anyone
      if (status != 0 && status != 200) {  // the replica refused the request: its answer is the answer
        relay.status = status;
        return true;
      }
      if (!r || !finished) return false;  // the stream was cut: it resumes on another replica
      return true;
    });
    std::lock_guard l(relay.mu);
    relay.done = true;
    relay.cv.notify_all();
  }

  // Every second: the replicas' metrics (tokens, time to first token, batches, queues), summed
  // into what /metrics shows after the front end's own; a stopped replica's counters kept.
  void scrape() {
    std::set<std::string> own;
    for (const auto& [family, type] : parse_exposition(metrics_.text()).families) own.insert(family);
    auto keep = [&own](const std::string& family) { return !own.count(family); };
    std::map<int, Exposition> live;  // by pid
    Exposition retired;
    std::unique_lock lock(scrape_mu_);
    while (scraping_) {
      lock.unlock();
      std::set<int> running, ports;
      for (const ReplicaSet::Running& r : replicas_->running()) {
        running.insert(r.pid);
        ports.insert(r.port);
        if (!r.ready || r.port == 0) continue;
        httplib::Client client("127.0.0.1", r.port);
        client.set_connection_timeout(0, 300'000);
        client.set_read_timeout(1);
        if (auto got = client.Get("/metrics", upstream_headers()); got && got->status == 200)
          live[r.pid] = parse_exposition(got->body);
      }
      for (auto it = live.begin(); it != live.end();) {
        if (running.count(it->first)) {
          ++it;
          continue;
        }
        add_exposition(retired, it->second, keep, true);
        it = live.erase(it);
      }
      connections_.keep_only(ports);
      Exposition shown = retired;
      for (const auto& [pid, e] : live) add_exposition(shown, e, keep);
      lock.lock();
      replica_metrics_ = exposition_text(shown);
      scrape_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return !scraping_; });
    }
  }

  std::FILE* log_;
  std::string token_ = comm::generate_token();
  std::string folder_ = fmt::format("/tmp/weft-serve-{}-{}", ::getpid(), comm::generate_token().substr(0, 8));
  std::unique_ptr<ReplicaSet> replicas_;
  ReplicaConnections connections_;
  std::mutex relays_mu_;
  std::condition_variable relays_cv_;
  int relays_ = 0;
  std::mutex scrape_mu_;
  std::condition_variable scrape_cv_;
  bool scraping_ = true;
  std::string replica_metrics_;
  std::thread scraper_;
};

}  // namespace

int serve_replicated(const ServeOptions& options, std::FILE* log) {
  FrontEnd front(options, log);
  return run_until_signal([&] { return front.run(); }, [&] { front.stop(); });
}

}  // namespace weft::serve
