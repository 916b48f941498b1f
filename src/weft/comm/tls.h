// TLS for the TCP data links between ranks (WEFT_TLS=1): encryption and per-record
// integrity of every byte after weft's handshake (auth.h), so that a host on the path
// between two machines can neither read a gradient nor change one unnoticed.
//
// TLS 1.2 with a pre-shared key derived from the job token (HMAC-SHA256(token,
// "weft tls psk")) and ephemeral Diffie-Hellman (DHE-PSK-AES128-GCM-SHA256): no
// certificates to manage, mutual authentication by the token, forward secrecy by the
// ephemeral key. The
// handshakes of all of a rank's TCP peers run side by side in one poll loop, so their
// order cannot deadlock.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "weft/comm/channel.h"

namespace weft::comm {

class TlsChannel : public Channel {
 public:
  ~TlsChannel() override;
  std::size_t write_some(const void* data, std::size_t n) override;
  std::size_t read_some(void* data, std::size_t n) override;
  std::size_t consume_some(std::size_t n, const Consumer& consume) override;
  int fd() const override { return socket_.fd(); }
  const char* kind() const override { return "tls"; }

  struct Impl;

 private:
  friend std::vector<std::unique_ptr<Channel>> tls_handshakes(std::vector<Socket>, const std::vector<bool>&,
                                                                const std::string&, double);
  TlsChannel(Socket s, std::unique_ptr<Impl> impl);
  Socket socket_;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<std::uint8_t[]> staging_;
};

// TLS over each connected socket (`server[i]`: this side accepted it), all handshakes at
// once, within `timeout_s`; throws CommError naming the failure (a peer with another
// token fails here too).
std::vector<std::unique_ptr<Channel>> tls_handshakes(std::vector<Socket> sockets, const std::vector<bool>& server,
                                                     const std::string& token, double timeout_s);

}  // namespace weft::comm
