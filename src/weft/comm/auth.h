// The job token and the mutual challenge-response every weft connection starts with.
//
// Every process of a job shares a secret token (WEFT_JOB_TOKEN). A connection begins:
//   acceptor -> connector: "WEFTAUTH", version, purpose, nonce_a (32 random bytes)
//   connector -> acceptor: nonce_c, identity (u32), HMAC-SHA256(token, "connect"|purpose|nonce_a|nonce_c|identity)
//   acceptor -> connector: identity (u32), HMAC-SHA256(token, "accept"|purpose|nonce_a|nonce_c|identity_a|identity_c)
// Each side checks the other's MAC in constant time and drops the connection on a
// mismatch, so a process of another job or a stranger never gets a byte of data, and a
// recorded handshake cannot be replayed (fresh nonces).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace weft::comm {

using Digest = std::array<std::uint8_t, 32>;

Digest hmac_sha256(const std::string& key, const std::string& message);
bool digest_equal(const Digest& a, const Digest& b);  // constant time
std::string random_bytes(std::size_t n);
// A new token: 32 random bytes as hex.
std::string generate_token();
// An estimate of a token's entropy in bits, for a warning: its length times the log2 of the
// alphabet its characters come from (hex digits; else lower case, upper case, digits, other
// printable), or of
// the distinct characters it uses when they are fewer than 16 (a repeated pattern).
// generate_token's 64 hex digits: 256 bits.
double token_strength_bits(const std::string& token);
constexpr double kMinTokenBits = 128;
// The job token from WEFT_JOB_TOKEN; throws ConfigError when it is missing or too short.
std::string job_token_from_env();

enum class Purpose : std::uint8_t { kStore = 1, kPeer = 2 };

// The acceptor's side in two steps, for servers that wait on many connections at once: the
// hello to send (keep the nonce), then the connector's reply (kAcceptReplyBytes) checked and
// the answer to send; throws CommError("bad job token") on a wrong MAC.
struct AcceptStart {
  std::string hello, nonce;
};
constexpr std::size_t kAcceptReplyBytes = 32 + 4 + 32;
AcceptStart start_accept(Purpose purpose);
struct AcceptEnd {
  std::uint32_t their_identity;
  std::string answer;
  Digest session;  // session_key of this connection
};
AcceptEnd finish_accept(const std::string& token, Purpose purpose, const std::string& nonce, std::uint32_t my_identity,
                        const std::uint8_t* reply);

struct Deadline;
class Socket;

// Connections refused by `who` ("weft store", "weft rank 3"), logged on stderr with the
// peer's address and the reason: the first ten one by one, then one line per thousand, so a
// flood of strangers cannot flood the log.
class RefusalLog {
 public:
  explicit RefusalLog(std::string who) : who_(std::move(who)) {}
  // Counts one refusal and logs it (unless `quiet`: the server is stopping).
  void refuse(const std::string& peer, const std::string& why, bool quiet = false);
  int count() const { return count_.load(); }

 private:
  std::string who_;
  std::atomic<int> count_{0};
};

// Accepts connections on `listen_fd` and runs their handshakes side by side (one poll loop)
// until `count` peers for which `wanted(identity)` holds are in, or the deadline passes
// (CommError). A connection that stays silent, sends bad bytes or the wrong token, or names
// an identity not wanted holds only its own slot, for at most `handshake_s`, and is logged on
// stderr as `who` refusing it (RefusalLog); at most
// `max_pending` handshakes run at once (the oldest is dropped for a new one). Returns the
// peers' identities and their (blocking) sockets.
struct AcceptedPeer {
  std::uint32_t identity;
  int fd;  // owned by the caller
};
std::vector<AcceptedPeer> accept_authenticated(int listen_fd, const std::string& token, Purpose purpose,
                                               std::uint32_t my_identity, int count,
                                               const std::function<bool(std::uint32_t)>& wanted, double timeout_s,
                                               double handshake_s, const std::string& who, int max_pending = 1024);

// Both run the handshake on a connected socket and return the peer's identity; they throw
// CommError ("bad job token", "handshake timed out", ...) on failure.
std::uint32_t accept_handshake(int fd, const std::string& token, Purpose purpose, std::uint32_t my_identity,
                               double timeout_s);
std::uint32_t connect_handshake(int fd, const std::string& token, Purpose purpose, std::uint32_t my_identity,
                                double timeout_s, Digest* session = nullptr);

// A key for what follows the handshake (the store's frame MACs, frame_mac.h), from the token
// and both nonces: fresh for every connection, known only to its two ends.
Digest session_key(const std::string& token, Purpose purpose, const std::string& nonce_a, const std::string& nonce_c);

}  // namespace weft::comm
