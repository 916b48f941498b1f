// The key-value store of a job, served over TCP by rank 0 at MASTER_ADDR:MASTER_PORT.
// Ranks use it to exchange endpoints at rendezvous (and later to agree on restarts).
// Every connection is authenticated with the job token (auth.h); refused connections are
// logged on stderr with their address (the first ten, then one line per thousand).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "weft/comm/frame_mac.h"
#include "weft/comm/socket.h"

namespace weft::comm {

// How much a store spends on strangers: connections that have not proven the token.
struct StoreLimits {
  int max_pending = 1024;       // unauthenticated at once; the oldest is dropped for a new one
  double auth_timeout_s = 10;   // to finish the handshake
};

// One thread, one poll loop over every connection: no thread per connection, a deadline on
// each handshake, a bound on unauthenticated connections (a flood of them, half-open or
// closed at once, costs the job nothing but their slots), and a full descriptor table
// (EMFILE) answered by dropping the oldest stranger, never by failing.
class StoreServer {
 public:
  // Listens on addr:port (port 0: any free port, see port()).
  StoreServer(const std::string& addr, int port, std::string token, StoreLimits limits = {});
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const { return port_; }
  // Connections refused so far (bad token, bad bytes, no handshake in time), for tests.
  int refused() const;
  // Connections open now (authenticated or not), for tests.
  int connections() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  int port_ = 0;
  std::thread loop_;
};

class StoreClient {
 public:
  // Connects (retrying until timeout_s: the server may start later) and authenticates.
  StoreClient(const std::string& host, int port, const std::string& token, std::uint32_t identity, double timeout_s);
  void set(const std::string& key, const std::string& value);
  // Waits up to timeout_s for the key; nullopt on timeout.
  std::optional<std::string> get(const std::string& key, double timeout_s);
  std::int64_t add(const std::string& key, std::int64_t delta);
  bool check(const std::string& key);
  void erase(const std::string& key);
  // Waits for all keys until the deadline; returns the ones still missing.
  std::vector<std::string> wait_all(const std::vector<std::string>& keys, double timeout_s);
  // This end's IP address on the connection to the store: the address peers can reach.
  std::string local_address() const;

 private:
  std::string request(std::uint8_t op, const std::string& body, double timeout_s, std::uint8_t* status);
  Socket socket_;
  std::mutex mu_;
  std::string where_;
  FrameMac mac_;
};

}  // namespace weft::comm
